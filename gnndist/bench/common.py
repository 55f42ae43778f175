"""What every suite shares: the machine description, CSV rows, training runs and their medians."""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gnndist.errors import UserError
from gnndist.files import atomic_file

if TYPE_CHECKING:
    from gnndist.bench.tta_protocol import TTASettings

# every row starts with these; a suite's own columns follow in the order it first writes them
ENV_COLUMNS = ("suite", "time", "machine", "cpu", "cores", "memory_gb", "device", "torch", "gnndist", "git",
               "loadavg_1m")
BREAKDOWN = ("aggregation_s", "dense_s", "comm_s", "other_s")


@dataclass
class Settings:
    """One ``gnndist bench`` invocation's choices (see ``gnndist bench --help``)."""

    out: Path
    quick: bool = False
    device: str = "cpu"
    dataset: str | None = None
    parts: list[int] = field(default_factory=list)
    epochs: int = 7
    warmup: int = 2
    model: str = "gcn"
    hidden: int = 64
    layers: int = 2
    root: str | None = None
    launcher: str | None = None  # a command prefix with {nproc}, {nnodes}, {per_node} (see docs/benchmarks.md)
    per_node: int | None = None  # ranks per node under the launcher (default: all P on one node)
    work: Path | None = None  # where partitions are written (default: a temporary folder; shared storage on clusters)
    plots: bool = True
    strategies: list[str] = field(default_factory=list)  # strong: only these (default: every layout that fits)
    train_parts: list[int] | None = None  # partition: train at these P (default: 4 quick, 4 and 8)
    grid: list[str] = field(default_factory=list)  # model: DATASET:MODEL:HIDDEN cases (default: its MODEL_GRID)
    tta: TTASettings | None = None  # tta: its own choices (default: TTASettings(), or its quick() with --quick)


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        return 0.0


def environment(device: str) -> dict:
    """The columns that describe where and with what a row was measured (load average added per row)."""
    import gnndist

    dev = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else "cpu"
    return {"machine": platform.node(), "cpu": _cpu_name(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
            "device": dev, "torch": torch.__version__, "gnndist": gnndist.__version__, "git": _git_commit()}


def machine_label(device: str) -> str:
    """A short name for the results folder: ``<cores>core-cpu`` or the GPU's name."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0).replace(" ", "-").lower()
    return f"{os.cpu_count()}core-cpu"


class Rows:
    """The rows of one suite, each stamped with the environment, the suite, the clock time and the load."""

    def __init__(self, suite: str, env: dict):
        self.suite, self.env, self.rows = suite, env, []

    def add(self, **values) -> dict:
        row = {"suite": self.suite, "time": datetime.datetime.now().isoformat(timespec="seconds"), **self.env,
               "loadavg_1m": loadavg(), **values}
        self.rows.append(row)
        print("  " + ", ".join(f"{k}={_fmt(v)}" for k, v in values.items()), flush=True)
        return row


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def write_csv(path: Path, rows: list[dict]) -> Path:
    """One row per measurement; columns: :data:`ENV_COLUMNS`, then every other key in order of appearance."""
    cols = list(ENV_COLUMNS)
    for r in rows:
        cols += [k for k in r if k not in cols]
    with atomic_file(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in cols})
    return path


def read_csv(path: Path) -> list[dict]:
    """Rows of a bench CSV with numbers parsed back (empty cells: None)."""
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _parse(v: str):
    if v == "":
        return None
    for tp in (int, float):
        try:
            return tp(v)
        except ValueError:
            pass
    return v


# ---------------------------------------------------------------------- training runs
def train(partdir: Path, ranks: int, s: Settings, flags: list[str] = ()) -> dict:
    """``gnndist train PARTDIR`` on ``ranks`` ranks (``--ranks``, or ``s.launcher``): summary + per-epoch log.

    Returns the ``--json`` summary with ``epochs_log`` (the per-epoch rows of ``--log-file``).
    """
    with tempfile.TemporaryDirectory(prefix="gnndist-bench-") as tmp:
        where = s.out if s.launcher else Path(tmp)  # under a launcher, rank 0 may run on another node: shared storage
        where.mkdir(parents=True, exist_ok=True)
        log = where / f".train-{os.getpid()}.jsonl"
        log.unlink(missing_ok=True)
        args = ["train", str(partdir), "--epochs", str(s.epochs), "--model", s.model, "--hidden", str(s.hidden),
                "--layers", str(s.layers), "--json", "--no-progress", "--profile", "--log-file", str(log), *flags]
        if s.launcher:
            per_node = min(s.per_node or ranks, ranks)
            nnodes = -(-ranks // per_node)
            argfile = log.with_suffix(".args.json")  # the launcher's parser never sees gnndist's flags
            argfile.write_text(json.dumps(args))
            cmd = shlex.split(s.launcher.format(nproc=ranks, nnodes=nnodes, per_node=per_node))
            cmd += ["-m", "gnndist.bench.rank", str(argfile)]
        else:
            cmd = [sys.executable, "-m", "gnndist.cli", *args, "--ranks", str(ranks)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(f"bench: `{' '.join(cmd)}` failed (exit {r.returncode}): {tail}")
        lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
        summary = json.loads(lines[-1])
        summary["epochs_log"] = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
        log.unlink(missing_ok=True)
        log.with_suffix(".args.json").unlink(missing_ok=True)
    return summary


def timing_columns(summary: dict, warmup: int) -> dict:
    """Median epoch time after ``warmup`` epochs, and the breakdown of the median epoch (rank 0).

    The parts of one epoch are exclusive (:mod:`gnndist.dist.timing`), so they add up to its time
    up to the untimed statements between them.
    """
    epochs = summary["epochs_log"][warmup:] or summary["epochs_log"]
    times = [e["time_s"] for e in epochs]
    mid = sorted(epochs, key=lambda e: e["time_s"])[(len(epochs) - 1) // 2]  # the (lower) median epoch
    per_rank = summary.get("per_rank", [])
    sent = [r["spmm_bytes_sent"] for r in per_rank] or [0]
    mem = [r["peak_memory_bytes"] for r in per_rank] or [0]
    return {"epochs_timed": len(times), "epoch_s": statistics.median(times), "epoch_s_min": min(times),
            "median_epoch_s": mid["time_s"], **{k: mid.get(k, 0.0) for k in BREAKDOWN},
            "breakdown_synchronised": summary.get("breakdown_synchronised", False),
            "bytes_per_rank": sum(sent) / len(sent), "bytes_per_rank_max": max(sent),
            "peak_memory_per_rank_mb": round(sum(mem) / len(mem) / 2**20, 1),
            "peak_memory_max_mb": round(max(mem) / 2**20, 1), "final_loss": summary.get("final_loss")}


def strategy_runs(P: int) -> list[tuple[str, int]]:
    """``(strategy, replication)`` of every layout that fits ``P`` ranks: 1d, 1.5d (c | P, c != sqrt P), 2d, auto."""
    if P == 1:
        return [("1d", 1)]
    s = int(round(P**0.5))
    square = s * s == P
    out = [("1d", 1)] + [("1.5d", c) for c in range(2, P) if P % c == 0 and not (square and c == s)]
    if s * s == P:
        out.append(("2d", s))
    return out + [("auto", 1)]


def strategy_flags(strategy: str, c: int) -> list[str]:
    return ["--strategy", strategy] + (["--replication", str(c)] if strategy == "1.5d" else [])
