"""Per-epoch losses of seven Cora trainings on 4 ranks, to show a refactoring changed no number.

    python scripts/behaviour_check.py record OUT [--cache DIR]   # gnndist run cora --ranks 4 --epochs 20 ...
    python scripts/behaviour_check.py compare BEFORE AFTER

``record`` runs ``gnndist run cora --ranks 4 --epochs 20 --log-file OUT/<case>.jsonl`` for ``--strategy 1d``,
``1.5d --replication 2``, ``2d``, ``auto`` and ``--model gcn2 --layers 8``, ``--model revgnn --layers 8``,
``--model gat``, with the partitions cached in ``--cache`` (``$GNNDIST_PARTITIONS``): record twice with
the same cache (before and after a change) and both trainings see the same parts. ``compare`` prints, per
case, how many epochs are bit-identical and the largest relative difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CASES = {
    "1d": ["--strategy", "1d"],
    "1.5d-c2": ["--strategy", "1.5d", "--replication", "2"],
    "2d": ["--strategy", "2d"],
    "auto": ["--strategy", "auto"],
    "gcn2-8": ["--model", "gcn2", "--layers", "8"],
    "revgnn-8": ["--model", "revgnn", "--layers", "8"],
    "gat": ["--model", "gat"],
}


def record(out: Path, cache: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **({"GNNDIST_PARTITIONS": cache} if cache else {})}
    for name, flags in CASES.items():
        log = out / f"{name}.jsonl"
        log.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "gnndist.cli", "run", "cora", "--ranks", "4", "--epochs", "20", "--no-progress",
               "--log-file", str(log), *flags]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        print(f"{name}: exit {r.returncode}" + (f" {r.stderr.strip().splitlines()[-1]}" if r.returncode else ""),
              flush=True)


def losses(path: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines() if line.strip()]


def compare(before: Path, after: Path) -> None:
    for name in CASES:
        a, b = losses(before / f"{name}.jsonl"), losses(after / f"{name}.jsonl")
        same = sum(x == y for x, y in zip(a, b))
        rel = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float("nan"))
        print(f"{name:9s} epochs {len(a)}/{len(b)}  bit-identical {same}/{len(a)}  max relative difference {rel:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--cache", default=None, help="partition cache ($GNNDIST_PARTITIONS) shared by both recordings")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    record(args.out, args.cache) if args.cmd == "record" else compare(args.before, args.after)


if __name__ == "__main__":
    main()
