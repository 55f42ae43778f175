"""Start the ranks: in this process (one rank, or one rank of ``torchrun``) or ``--nproc N`` local ranks.

``--nproc N`` starts the ranks through PyTorch's own elastic launcher
(``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` runs), so the
training code path is the one ``torchrun`` gives, and:

* SIGINT / SIGTERM to the launcher stop every rank (the agent forwards the signal, then
  kills what is left) and the launcher exits 130 / 143 with one line; a rank also dies
  with its launcher (``PR_SET_PDEATHSIG``), so none is orphaned;
* when ranks fail together the launcher prints one line, the root cause: the earliest
  error of a rank that failed on its own, before any "a peer failed" of the others;
* ``--max-restarts R`` restarts the group after a failure; with ``--checkpoint`` the
  restarted ranks resume from the newest good checkpoint (as they do under ``torchrun
  --max-restarts``).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

import torch

from gnndist.config import TrainConfig
from gnndist.errors import PeerFailed, UserError


def under_torchrun() -> bool:
    """True when the launcher (torchrun or a spawned rank) already set the rank environment."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def restart_count() -> int:
    """How many times the elastic agent (``torchrun`` or ``--nproc``) restarted this group."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def _supported(cls, **kwargs) -> dict:
    """The keyword arguments ``cls`` (a dataclass) accepts: options newer torch versions added."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage(msg: str, cfg: TrainConfig) -> None:
    """Say which stage the run is in, terminal or not (to standard error under ``--json``, whose stdout is data)."""
    print(f"gnndist: {msg}", file=sys.stderr if cfg.run.json else sys.stdout, flush=True)


def make_strategy(cfg: TrainConfig):
    """The run's aggregation strategy from ``--strategy``, ``--replication``, ``--network``, ``--overlap``."""
    from gnndist.cost import network
    from gnndist.strategies import get_strategy

    d = cfg.dist
    kw = {"overlap": d.overlap, "replication": d.replication}
    if d.strategy == "auto":
        kw["network"] = None if d.network == "probe" else network(d.network, d.alpha, d.beta)
        kw["overrides"] = {"alpha": d.alpha, "beta": d.beta}
    return get_strategy(d.strategy, **kw)


def collective_error(e: BaseException, rank: int, timeout: float) -> PeerFailed | None:
    """A one-line :class:`PeerFailed` for an exception raised by a collective, naming it; else None.

    The collective is the innermost ``torch.distributed`` call in the traceback, the
    operation the gnndist function that called it.
    """
    op = caller = None
    for frame, _ in traceback.walk_tb(e.__traceback__):
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if frame.f_code.co_filename.endswith("distributed_c10d.py"):
            op = op or frame.f_code.co_name
        elif op is None and "gnndist" in frame.f_code.co_filename and not frame.f_code.co_filename.endswith("grid.py"):
            caller = name
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(". This is typically")[0]  # gloo's source location, advice
    peer_words = ("gloo", "connection", "timed out", "timeout", "peer", "socket", "nccl", "broken pipe")
    if op is None and not any(w in text.lower() for w in peer_words):
        return None
    where = f"{op or 'a collective'}" + (f" in {caller}" if caller else "")
    return PeerFailed(f"rank {rank}: {where} failed: a peer rank died or did not answer within "
                      f"--timeout {timeout:g}s ({text})")


def run_rank(partdir: str, cfg: TrainConfig) -> dict:
    """Body of one rank: join the grid, load the part, train; returns the summary.

    After an elastic restart with ``--checkpoint``, training resumes from the newest good checkpoint.
    """
    import torch.distributed as dist

    from gnndist.graph import DistGraph
    from gnndist.grid import init
    from gnndist.trainer import fit_runs

    if cfg.kernel.kernel != "auto":
        os.environ["GNNDIST_KERNEL"] = cfg.kernel.kernel
    grid = init(cfg.dist.backend, cfg.dist.timeout, check_collectives=cfg.dist.check_collectives)
    logging.basicConfig(level=logging.INFO if grid.is_main else logging.WARNING, format="gnndist: %(message)s",
                        stream=sys.stderr)
    try:
        error, graph = None, None
        try:
            graph = DistGraph.load(partdir, grid, strategy=make_strategy(cfg), comm_dtype=cfg.dist.comm_dtype)
        except UserError as e:
            error = e
        failed = grid.all_reduce_(torch.tensor([float(error is not None)], device=grid.device))  # fail together
        if error is not None:
            raise error
        if failed.item() > 0:
            raise PeerFailed(f"rank {grid.rank}: another rank could not load its part (see its error)")
        if grid.is_main:
            stage(f"training {cfg.model.model} on {grid.world_size} rank(s) for {cfg.optim.epochs} epochs; "
                  f"{grid.describe()}", cfg)  # the backend and device, once
        summary = fit_runs(graph, cfg, resume_if_any=bool(cfg.run.checkpoint) and restart_count() > 0)
        grid.barrier()
        return summary
    except (RuntimeError, dist.DistError) as e:
        peer = collective_error(e, grid.rank, cfg.dist.timeout)
        if peer is None:
            raise
        raise peer from None
    finally:
        grid.destroy()


def _report(summary: dict, cfg: TrainConfig) -> None:
    if cfg.run.json:
        print(json.dumps(summary), flush=True)
        return
    m = summary["metric"]
    key = m.replace("-", "_")
    runs = summary.get("runs") or []
    where = f"{summary['dataset']}: {summary['model']} on {summary['nproc']} rank(s)"
    cost = f"({summary['epoch_time_s'] * 1e3:.1f} ms/epoch, {summary['comm_bytes_per_epoch']:,} comm bytes/epoch)"
    if len(runs) <= 1:
        print(f"{where}, best epoch {summary['best_epoch']}: {m} train {summary[f'train_{key}']:.4f} "
              f"val {summary[f'val_{key}']:.4f} test {summary[f'test_{key}']:.4f} {cost}", flush=True)
        return
    for r in runs:
        split = "" if r["split"] is None else f" split {r['split']}"
        print(f"run {r['run']} (seed {r['seed']}{split}): best epoch {r['best_epoch']} of {r['epochs_run']}: "
              f"{m} train {r[f'train_{key}']:.4f} val {r[f'val_{key}']:.4f} test {r[f'test_{key}']:.4f}")
    print(f"{where}, {len(runs)} runs, {m} mean ± std: " + " ".join(
        f"{s} {summary[f'{s}_{key}']:.4f} ± {summary[f'{s}_{key}_std']:.4f}" for s in ("train", "val", "test"))
        + f" {cost}", flush=True)


# ---------------------------------------------------------------------- spawned ranks
def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its launcher dies, whatever the cause (no orphans)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _error_path(errdir: str, rank: int) -> Path:
    return Path(errdir) / f"attempt{restart_count()}-rank{rank}.json"


def _worker(partdir: str, cfg_dict: dict, errdir: str) -> dict | None:
    """Entry point of one ``--nproc`` rank (run by the elastic agent); rank 0 returns the summary.

    A signal from the launcher ends the rank at once, without a traceback; a user error is
    written to ``errdir`` for the launcher to report once, and the rank exits 2; any other
    error prints its traceback, is written there too (the root cause before any peer's "a
    peer failed") and the rank exits 1.
    """
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    rank = int(os.environ["RANK"])
    try:
        summary = run_rank(partdir, TrainConfig.from_dict(cfg_dict))
    except UserError as e:
        record = {"time": time.time(), "message": str(e), "secondary": isinstance(e, PeerFailed), "code": 2}
        _error_path(errdir, rank).write_text(json.dumps(record))
        sys.exit(2)
    except Exception as e:  # a bug, not the input: its traceback here (the agent would keep it), the root cause there
        traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        record = {"time": time.time(), "message": f"rank {rank}: {type(e).__name__}: {first} (traceback above)",
                  "secondary": False, "code": 1}
        _error_path(errdir, rank).write_text(json.dumps(record))
        sys.stderr.flush()
        sys.exit(1)
    atexit.register(_leave_now)  # after the agent has read the summary: skip C++ teardown
    return summary if rank == 0 else None


def _leave_now() -> None:
    """End a finished rank at the start of interpreter exit, after flushing.

    A normal exit runs C++ static destructors, and gloo's threads can then abort a rank
    that finished well (SIGABRT, "terminate called without an active exception"), which
    the agent would report as a failed group.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _stop_resource_tracker() -> None:
    """Stop and reap multiprocessing's helper process now, rather than leave it to outlive the launcher."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def _root_cause(errdir: Path, failures: dict) -> tuple[str, int]:
    """The line and exit code for a failed group: the earliest own error, else a killed rank, else a peer's error."""
    records = []
    for path in errdir.glob("attempt*-rank*.json"):
        attempt, rank = (int(s) for s in path.stem.removeprefix("attempt").split("-rank"))
        records.append((attempt, json.loads(path.read_text()), rank))
    last = max((a for a, _, _ in records), default=0)
    errors = sorted((r["time"], r["message"], r.get("code", 2)) for a, r, _ in records
                    if a == last and not r["secondary"])
    if errors:
        return errors[0][1], errors[0][2]
    killed = sorted((f.timestamp, rank, -f.exitcode) for rank, f in failures.items() if (f.exitcode or 0) < 0)
    if killed:
        _, rank, sig = killed[0]
        return f"rank {rank} was killed by {signal.Signals(sig).name}", 1
    peers = sorted((r["time"], r["message"]) for a, r, _ in records if a == last)
    if peers:
        return peers[0][1], 2
    rank, f = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    return f"rank {rank} failed with exit code {f.exitcode} (its output is above)", 1


def _elastic(partdir: str, cfg: TrainConfig) -> int:
    """Run ``cfg.dist.nproc`` ranks under the elastic agent; returns the exit code."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    n = cfg.dist.nproc
    tmp = Path(tempfile.mkdtemp(prefix="gnndist-launch-"))
    errdir = tmp / "errors"
    errdir.mkdir()
    lc = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}",
        rdzv_configs={"timeout": int(max(cfg.dist.timeout, 1))},
        max_restarts=cfg.dist.max_restarts, monitor_interval=0.1, start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp / "logs")),
        **_supported(LaunchConfig, shutdown_timeout=5),  # not in every torch (2.11 lacks it)
    )
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    stage(f"starting {n} ranks", cfg)
    logging.disable(logging.CRITICAL)  # the agent's own logs; we print one line of our own
    try:
        results = elastic_launch(lc, _worker)(partdir, cfg.to_dict(), str(errdir))
    except SignalException as e:
        sig = signal.Signals(e.sigval)
        print(f"gnndist: {'interrupted' if sig == signal.SIGINT else f'stopped by {sig.name}'}; "
              f"all {n} ranks stopped", file=sys.stderr, flush=True)
        return 128 + int(sig)
    except ChildFailedError as e:
        line, code = _root_cause(errdir, e.failures)
        print(f"gnndist: error: {line}", file=sys.stderr, flush=True)
        return code
    finally:
        logging.disable(logging.NOTSET)
        for s, h in handlers.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
        _stop_resource_tracker()
    _report(results[0], cfg)
    return 0


def launch(partdir: str, cfg: TrainConfig) -> int:
    """Train on ``partdir`` with one rank per part; returns the exit code (0; 2 for user errors; 130/143 on signals)."""
    from gnndist.grid import choose_backend
    from gnndist.partition import read_meta
    from gnndist.trainer import plan_runs

    plan_runs(cfg, read_meta(partdir))  # a split or run that cannot be: one line, before any rank starts (every rank alike)
    if under_torchrun() or cfg.dist.nproc == 1:
        summary = run_rank(partdir, cfg)
        if int(os.environ.get("RANK", "0")) == 0:
            _report(summary, cfg)
        return 0
    parts = read_meta(partdir)["parts"]
    make_strategy(cfg).grid_shape(cfg.dist.nproc)  # a layout that cannot fit: one line, before any rank starts
    if parts != cfg.dist.nproc:
        raise UserError(f"{partdir} has {parts} parts but --nproc is {cfg.dist.nproc}: they must match")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choose_backend(cfg.dist.backend, 0, cfg.dist.nproc, gpus)  # --backend nccl without a GPU per rank: one line, now
    return _elastic(partdir, cfg)
