"""The driver of a mini-batch peer process (``gnndist bench tta``'s step 3; :mod:`gnndist.bench.tta`).

    rec = run_peer(python, MINIBATCH, peer_job(...), evaluate, problem.sha256, work)

The peer (``gnndist/bench/minibatch.py``, run by the peers' own python) reads the job file and prints JSON lines:

    {"event": "setup", "setup_s": s, "sha256": {array: hash}, "versions": {...}}
    {"event": "eval", "snapshot": "snap.npz", "train_s": s, "epoch": e, "steps": n}   then waits for "ok" / "stop"
    {"event": "done", "train_s": s, "steps": n, "epochs": e, "s_per_epoch": s}
    {"event": "check", "path": "check.npz"}     in check mode, in place of training: its weights and logits [N, C]

The driver checks the hashes, scores every snapshot (weights under the names of gnndist's model) with the shared
evaluator while the peer's clock is paused, deletes it, answers, and returns what the peer reported.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnndist.bench.tta_protocol import Hyper, Point, check_same
from gnndist.errors import UserError


@dataclass
class PeerRecord:
    """What a peer process reported: its set-up, the curve its snapshots gave, and its last line (``done``, or in
    check mode ``check``, whose file's arrays are in ``check``: the weights and ``logits``)."""

    setup: dict
    points: list[Point]
    last: dict
    eval_s: float = 0.0
    evals: int = 0
    check: dict[str, np.ndarray] | None = None


def peer_job(problem: Path, peer: str, hyper: Hyper, seed: int, threads: int, budget_s: float, max_epochs: int,
             eval_every_s: float, snapshots: Path, mode: str = "train") -> dict:
    """The job file's keys (``gnndist/bench/minibatch.py`` reads them)."""
    return {"problem": str(problem), "peer": peer, "layers": hyper.layers, "hidden": hyper.hidden,
            "dropout": hyper.dropout, "lr": hyper.lr, "weight_decay": hyper.weight_decay,
            "batch_size": hyper.batch_size, "fanouts": list(hyper.fanouts), "num_parts": hyper.num_parts,
            "clusters_per_batch": hyper.clusters_per_batch, "threads": threads, "seed": seed, "budget_s": budget_s,
            "max_epochs": max_epochs, "eval_every_s": eval_every_s, "snapshots": str(snapshots), "mode": mode}


def run_peer(python: str | Path, script: str | Path, job: dict, evaluate: Callable | None,
             expected: Mapping[str, str], work: Path, silence_s: float = 900.0) -> PeerRecord:
    """Run one peer job: check its hashes against ``expected``, score each snapshot with ``evaluate`` (then delete
    it) while the peer waits, answer ``ok`` or ``stop`` (at ``budget_s`` training seconds or ``max_epochs``), and
    collect its ``done`` line (in check mode its ``check`` line and file). A peer silent for ``silence_s`` (outside
    evaluations), one that exits without that line or with an error, or one that reports other hashes: a
    :class:`UserError` with the reason."""
    work.mkdir(parents=True, exist_ok=True)
    Path(job["snapshots"]).mkdir(parents=True, exist_ok=True)
    tag = f"{job['peer']}-s{job['seed']}-{os.getpid()}-{time.monotonic_ns()}"
    job_path, log_path = work / f"job-{tag}.json", work / f"peer-{tag}.log"
    job_path.write_text(json.dumps(job, indent=1) + "\n")
    who = f"{job['peer']} (seed {job['seed']})"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(python), str(script), str(job_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read, args=(proc.stdout, lines), daemon=True).start()
        try:
            rec = _converse(proc, lines, job, evaluate, expected, who, silence_s, log_path)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            shutil.rmtree(job["snapshots"], ignore_errors=True)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    if rc != 0:
        raise UserError(f"{who} exited with {rc} after its {rec.last['event']} line: {_tail(log_path)}")
    job_path.unlink(missing_ok=True)
    log_path.unlink(missing_ok=True)
    return rec


def _converse(proc, lines: queue.Queue, job: dict, evaluate, expected, who: str, silence_s: float,
              log: Path) -> PeerRecord:
    """The event loop of :func:`run_peer`: read, check, evaluate, answer, until ``done`` (or ``check``)."""
    setup, points, eval_s, evals = None, [], 0.0, 0
    while True:
        try:
            line = lines.get(timeout=silence_s)
        except queue.Empty:
            raise UserError(f"{who}: no line for {silence_s:.0f} s") from None
        if line is None:
            proc.wait()
            raise UserError(f"{who} exited with {proc.returncode} before its {_last(job)} line: {_tail(log)}")
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        kind = ev.get("event")
        if kind == "setup":
            check_same(expected, ev.get("sha256", {}), who=who)
            setup = ev
        elif kind == "eval":
            if setup is None:
                raise UserError(f"{who}: an eval line before its setup line")
            snap = Path(ev["snapshot"])
            try:
                t0 = time.perf_counter()
                with np.load(snap, allow_pickle=False) as z:
                    state = {k: torch.from_numpy(z[k]) for k in z.files}
                r = evaluate(state)
                eval_s, evals = eval_s + time.perf_counter() - t0, evals + 1
            finally:
                snap.unlink(missing_ok=True)
            points.append(Point(float(ev["train_s"]), float(ev["epoch"]), int(ev["steps"]), r["val"], r["test"]))
            stop = float(ev["train_s"]) >= job["budget_s"] or float(ev["epoch"]) >= job["max_epochs"]
            _answer(proc, "stop" if stop else "ok")
        elif kind in ("done", "check"):
            if setup is None:
                raise UserError(f"{who}: a {kind} line before its setup line")
            if kind != _last(job):
                raise UserError(f"{who}: a {kind} line in {job['mode']} mode")
            if kind == "done":
                return PeerRecord(setup, points, ev, eval_s, evals)
            with np.load(ev["path"], allow_pickle=False) as z:
                return PeerRecord(setup, [], ev, check={k: z[k] for k in z.files})


def _read(stream, lines: queue.Queue) -> None:
    """Every line of the peer's standard output into ``lines``, then ``None`` (it closed)."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _last(job: dict) -> str:
    """The event that ends a job of its mode."""
    return "check" if job["mode"] == "check" else "done"


def _answer(proc, word: str) -> None:
    try:
        proc.stdin.write(word + "\n")
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # it died: the reader sees the end of its output


def _tail(path: Path) -> str:
    if not path.exists():
        return "(no output)"
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


