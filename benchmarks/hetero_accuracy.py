"""R-GCN on typed graphs: featureless types as zero input rows against learned ones, and a homogeneous GCN on
the same papers, task and split.

``<dataset>-paper-word`` is a bag-of-words graph as a typed one (:func:`gnndist.datasets.hetero.paper_word`): ``paper``
(the dataset's nodes, their feature rows, labels and split) and ``word`` (one node per feature column, no features
of its own), relations ``(paper, cites, paper)`` (symmetric), ``(paper, has_word, word)`` for every nonzero
feature and its reverse ``rev_has_word``. ``synthetic-mag-<N>`` has its own featureless types (author,
institution, field_of_study). Every run is ``gnndist run`` on P ranks with the defaults (2 layers of 16, dropout
0.5, lr 0.01, weight decay 5e-4, 200 epochs, row-normalised features); a dataset without a split gets its
seeded 20/30-per-class one (``--split-seed 0``). One launch per dataset and mode trains ``--runs S`` (seeds
0 .. S-1, the same as S launches with ``--seed s``) and reports, per seed, the test accuracy at the epoch of best
validation accuracy. Modes:

    gcn        gnndist run <dataset> --model gcn                          (only for <dataset>-paper-word)
    zero       gnndist run <typed> --model rgcn --embedding zero          (featureless: their neighbours' mean)
    learn      gnndist run <typed> --model rgcn --embedding learn         (featureless: a learned row each)
    learn-wd   gnndist run <typed> --model rgcn --embedding learn --weight-decay 5e-3   (10x the weight decay,
               on every weight: there is no option for the embedding's alone)

    python benchmarks/hetero_accuracy.py                                   # the default datasets, seeds 0..2
    python benchmarks/hetero_accuracy.py --datasets cora-paper-word --modes zero,learn,learn-wd --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from gnndist.datasets.hetero import parse_paper_word

from gnndist.testing import shared_data

DATASETS = "cora-paper-word,dblp-paper-word,amazon-photo-paper-word,synthetic-mag-2k"
MODES = {
    "gcn": ["--model", "gcn"],
    "zero": ["--model", "rgcn", "--embedding", "zero"],
    "learn": ["--model", "rgcn", "--embedding", "learn"],
    "learn-wd": ["--model", "rgcn", "--embedding", "learn", "--weight-decay", "5e-3"],
}


def command(typed: str, mode: str, seeds: int, ranks: int, root: str) -> list[str] | None:
    """The ``gnndist run`` of ``mode`` on ``typed`` (``gcn``: on its base dataset; None where it has none)."""
    dataset = parse_paper_word(typed) if mode == "gcn" else typed
    if dataset is None:
        return None
    return ["gnndist", "run", dataset, *MODES[mode], "--ranks", str(ranks), "--runs", str(seeds), "--seed", "0",
            "--root", root, "--json", "--no-progress"]


def launch(cmd: list[str], data: str) -> dict:
    """One ``gnndist run`` (partitions cached under ``data``); its JSON summary."""
    full = [sys.executable, "-m", "gnndist.cli", *cmd[1:]]
    proc = subprocess.run(full, check=False, capture_output=True, text=True, env={**os.environ, "GNNDIST_DATA": data})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=DATASETS, help=f"comma list of typed graphs (default {DATASETS})")
    ap.add_argument("--modes", default="gcn,zero,learn", help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds 0 .. S-1 (the split is fixed)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--root", default=os.path.normpath(shared_data()),
                    help="dataset root, only read (default: the team's shared data)")
    ap.add_argument("--json", help="also write every run to this JSON file")
    args = ap.parse_args()
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": os.cpu_count(), "load_start": os.getloadavg()}
    print(f"{meta['started']}: load average {meta['load_start']}", flush=True)
    acc: dict[tuple[str, str], list[float]] = {}
    runs = []
    with tempfile.TemporaryDirectory(prefix="gnndist-hetero-acc-") as data:
        for typed in args.datasets.split(","):
            for mode in args.modes.split(","):
                cmd = command(typed, mode, args.seeds, args.ranks, args.root)
                if cmd is None:
                    continue
                t0, load0 = time.time(), os.getloadavg()[0]
                s = launch(cmd, data)
                load1 = os.getloadavg()[0]
                acc[typed, mode] = [r["test_acc"] for r in s["runs"]]
                for r in s["runs"]:
                    runs.append({"dataset": typed, "mode": mode, "seed": r["seed"], "ranks": args.ranks,
                                 "test_acc": r["test_acc"], "val_acc": r["val_acc"], "train_acc": r["train_acc"],
                                 "best_epoch": r["best_epoch"], "epoch_time_s": s["epoch_time_s"],
                                 "wall_s": round(time.time() - t0, 1), "load": [load0, load1],
                                 "command": " ".join(cmd)})
                print(f"{typed:24s} {mode:8s} test {', '.join(f'{100 * x:.1f}' for x in acc[typed, mode])}  "
                      f"({s['epoch_time_s']:.2f} s/epoch, {time.time() - t0:.0f} s, load {load0:.1f}-{load1:.1f})",
                      flush=True)
    meta.update(ended=time.strftime("%Y-%m-%d %H:%M:%S %Z"), load_end=os.getloadavg())
    print(f"\ntest accuracy at the best validation epoch, mean ± std over {args.seeds} seeds (%), {args.ranks} ranks")
    print(f"{'dataset':24s} {'mode':8s} {'mean ± std':>12s}  {'vs zero':>7s}  seeds")
    for (typed, mode), xs in acc.items():
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        zero = acc.get((typed, "zero"))
        gap = f"{100 * (statistics.mean(xs) - statistics.mean(zero)):+.1f}" if zero and mode != "zero" else ""
        print(f"{typed:24s} {mode:8s} {100 * statistics.mean(xs):5.1f} ± {100 * sd:4.1f}  {gap:>7s}  "
              f"({', '.join(f'{100 * x:.1f}' for x in xs)})")
    print(f"{meta['ended']}: load average {meta['load_end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": {**meta, "argv": sys.argv}, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
