#!/usr/bin/env python
"""Sweep every graph of the shared data folder through `gnndist run` at several rank counts.

Not part of the test suite. For each dataset found under --data (a folder gnndist's registry
recognises, else each recognised data file inside it), the graph is loaded once in this process
to get its size (nodes, adjacency entries = directed nnz after symmetrising), then

    gnndist run PATH --ranks P --epochs E --json --timeout T --check-collectives --log-file F

runs for each P of --parts under a wall-clock limit (--per-run-timeout). The report is a
markdown table: per P the exit status (ok / exit N / timeout) and, for P other than the first
(the reference, normally 1), whether the per-epoch losses equal the reference's within --rtol
relative (the max relative difference is shown). Partitions are cached by gnndist in
$GNNDIST_PARTITIONS, set to --cache (under /tmp by default) so nothing else is written.

    .venv/bin/python scripts/sweep_shared.py --only cora,cornell --epochs 3
    .venv/bin/python scripts/sweep_shared.py --max-edges 1500000 --per-run-timeout 300 \\
        --out /tmp/sweep.md

Graphs run smallest first; --budget SECONDS stops starting new graphs once that much wall time
has passed (the rest are reported as not run). The table is rewritten after every graph, so a
partial report survives an interrupted sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
GNNDIST = Path(sys.executable).with_name("gnndist")
DATA_EXT = (".npz", ".mat", ".jlg", ".pt", ".gz", ".csv", ".txt", ".tsv", ".edges")


@dataclass
class Run:
    status: str = "not run"  # ok / exit N / timeout / not run / skipped
    wall_s: float = 0.0
    losses: list[float] = field(default_factory=list)
    final_loss: float | None = None
    error: str = ""


@dataclass
class Target:
    name: str
    path: str
    fmt: str = "?"
    nodes: int | None = None
    edges: int | None = None  # adjacency entries (directed nnz, both directions)
    note: str = ""  # skipped / load error / not run (budget)
    error: str = ""
    runs: dict[int, Run] = field(default_factory=dict)


def discover(data: Path, only: set[str], skip: set[str]) -> list[Target]:
    """Datasets under ``data``: a recognised folder, else each recognised file in it."""
    from gnndist.datasets.registry import detect_format

    out = []
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        if (only and folder.name not in only) or folder.name in skip:
            continue
        try:
            out.append(Target(folder.name, str(folder), detect_format(str(folder))))
            continue
        except Exception:  # noqa: BLE001 - not a folder format; look at its files
            pass
        found = []
        for f in sorted(folder.iterdir()):
            if not f.is_file() or not f.name.endswith(DATA_EXT):
                continue
            try:
                found.append((f, detect_format(str(f))))
            except Exception:  # noqa: BLE001
                continue
        # an id map such as arxiv-cit-hep-ph-ids.csv sniffs as an edge list: prefer real formats
        if any(fmt != "edgelist" for _, fmt in found):
            found = [(f, fmt) for f, fmt in found if fmt != "edgelist"]
        if not found:
            out.append(Target(folder.name, str(folder), note="no recognised data file"))
        for f, fmt in found:
            name = folder.name if len(found) == 1 else f"{folder.name}/{f.name}"
            out.append(Target(name, str(f), fmt))
    return out


def size(t: Target, cache: dict) -> None:
    """Fill nodes / edges by loading the graph with gnndist's own loader (cached on disk)."""
    key = t.path
    if key not in cache:
        from gnndist.datasets.registry import load

        try:
            d = load(t.path, format=t.fmt if t.fmt != "?" else None)
            cache[key] = {"nodes": int(d.num_nodes), "edges": int(d.edge_index.shape[1])}
        except Exception as e:  # noqa: BLE001 - a loader failure is a finding
            cache[key] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    c = cache[key]
    if "error" in c:
        t.note, t.error = "load error", c["error"]
    else:
        t.nodes, t.edges = c["nodes"], c["edges"]


def last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "error" in low or "exception" in low or "traceback" in low:
            return ln[:400]
    return lines[-1][:400] if lines else ""


def run_one(t: Target, p: int, args, work: Path, env: dict) -> Run:
    slug = t.name.replace("/", "__")
    log = work / "logs" / f"{slug}-p{p}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    cmd = [str(GNNDIST), "run", t.path, "--ranks", str(p), "--epochs", str(args.epochs),
           "--json", "--timeout", str(args.timeout), "--check-collectives",
           "--log-file", str(log), "--no-progress", *args.extra]
    r = Run()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.per_run_timeout)
        r.status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its ranks, this run only
        out, err = proc.communicate()
        r.status = "timeout"
    r.wall_s = time.monotonic() - t0
    (work / "logs" / f"{slug}-p{p}.stderr").write_text(err or "")
    lines = [ln for ln in (out or "").splitlines() if ln.strip()]
    if lines:
        try:
            r.final_loss = json.loads(lines[-1]).get("final_loss")
        except (json.JSONDecodeError, AttributeError):
            pass
    if log.exists():
        for ln in log.read_text().splitlines():
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                continue
            if "loss" in rec:
                r.losses.append(float(rec["loss"]))
    if r.status != "ok":
        r.error = last_error_line(err or "") or "(no stderr)"
    return r


def compare(ref: Run, r: Run, rtol: float) -> str:
    if ref.status != "ok" or not ref.losses:
        return "no reference"
    if r.status != "ok" or not r.losses:
        return "no losses"
    if len(ref.losses) != len(r.losses):
        return f"epochs {len(r.losses)} vs {len(ref.losses)}"
    rel = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(r.losses, ref.losses, strict=True))
    return f"{'equal' if rel <= rtol else '**DIFFER**'} ({rel:.1e})"


def fmt_int(v: int | None) -> str:
    return f"{v:,}" if v is not None else "?"


def render(targets: list[Target], args, started: float, loads: list[str], done: bool) -> str:
    ref = args.parts[0]
    head = ["dataset", "format", "nodes", "adj. entries"] + [f"P={p}" for p in args.parts]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    failures = []
    for t in targets:
        cells = [f"`{t.name}`", t.fmt, fmt_int(t.nodes), fmt_int(t.edges)]
        if t.note:
            cells += [t.note] * len(args.parts)
            if t.note == "load error":
                failures.append(f"- `{t.name}` (load): {t.error}")
        else:
            for p in args.parts:
                r = t.runs.get(p)
                if r is None:
                    cells.append("not run")
                    continue
                c = f"{r.status} {r.wall_s:.0f}s"
                if p != ref:
                    c += ", " + compare(t.runs.get(ref, Run()), r, args.rtol)
                cells.append(c)
                if r.status != "ok":
                    failures.append(f"- `{t.name}` P={p} ({r.status}): {r.error}")
        rows.append("| " + " | ".join(cells) + " |")
    took = time.monotonic() - started
    lines = [
        f"# gnndist sweep of {args.data}{'' if done else ' (in progress)'}",
        "",
        f"`{' '.join(sys.argv)}`",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {platform.node()}, {os.cpu_count()} CPUs; "
        f"epochs {args.epochs}, per-run timeout {args.per_run_timeout:.0f} s, "
        f"--timeout {args.timeout:g}, --check-collectives; losses compared with P={ref} at "
        f"rtol {args.rtol:g}; max edges {args.max_edges or 'none'}; wall {took:.0f} s.",
        f"Load average (1/5/15 min) seen: {'; '.join(loads)}.",
        "",
        *rows,
        "",
    ]
    if failures:
        lines += ["Failures (last error line of stderr):", "", *failures, ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"(default {DEFAULT_DATA})")
    ap.add_argument("--parts", default="1,3,4", help="rank counts; the first is the reference")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--only", default="", help="folder names, comma-separated")
    ap.add_argument("--skip", default="", help="folder names, comma-separated")
    ap.add_argument("--max-edges", type=int, default=0,
                    help="skip graphs with more adjacency entries than this (0: no limit)")
    ap.add_argument("--per-run-timeout", type=float, default=300.0, help="seconds per gnndist run")
    ap.add_argument("--timeout", type=float, default=60.0, help="gnndist's own --timeout")
    ap.add_argument("--budget", type=float, default=0.0,
                    help="start no new graph after this many seconds (0: no limit)")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--out", type=Path, default=None, help="markdown report (also printed)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gnndist-sweep"),
                    help="logs and size cache (default /tmp/gnndist-sweep)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="partition cache, $GNNDIST_PARTITIONS (default WORK/partitions)")
    ap.add_argument("extra", nargs="*", help="after --: more `gnndist run` options")
    args = ap.parse_args(argv)
    args.parts = [int(p) for p in args.parts.split(",") if p]
    started = time.monotonic()
    loads = []

    def load_now() -> None:
        loads.append(f"{time.strftime('%H:%M:%S')} " + " ".join(f"{x:.2f}" for x in os.getloadavg()))

    load_now()
    args.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GNNDIST_PARTITIONS=str(args.cache or args.work / "partitions"))
    os.environ["GNNDIST_PARTITIONS"] = env["GNNDIST_PARTITIONS"]
    split = lambda s: {x for x in s.split(",") if x}  # noqa: E731
    targets = discover(args.data, split(args.only), split(args.skip))

    size_file = args.work / "sizes.json"
    sizes = json.loads(size_file.read_text()) if size_file.exists() else {}
    for t in targets:
        if not t.note:
            print(f"sizing {t.name} ...", file=sys.stderr, flush=True)
            size(t, sizes)
            size_file.write_text(json.dumps(sizes, indent=1))
        if not t.note and args.max_edges and t.edges is not None and t.edges > args.max_edges:
            t.note = f"skipped (> {args.max_edges:,} entries)"
    targets.sort(key=lambda t: (t.edges is None, t.edges or 0, t.name))

    def write(done: bool) -> str:
        text = render(targets, args, started, loads, done)
        if args.out:
            args.out.write_text(text)
        return text

    for t in targets:
        if t.note:
            continue
        if args.budget and time.monotonic() - started > args.budget:
            t.note = "not run (budget)"
            continue
        for p in args.parts:
            print(f"run {t.name} P={p} ...", file=sys.stderr, flush=True)
            r = run_one(t, p, args, args.work, env)
            t.runs[p] = r
            print(f"  {r.status} {r.wall_s:.0f}s {r.error}", file=sys.stderr, flush=True)
        load_now()
        write(False)
    load_now()
    print(write(True))
    bad = any(r.status != "ok" for t in targets for r in t.runs.values())
    return 1 if bad or any(t.note == "load error" for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
