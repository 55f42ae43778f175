"""R-GCN on a typed graph built from real data against a homogeneous GCN on the same task and split.

``cora-paper-word`` is Cora as a typed graph (:func:`gnndist.datasets.hetero.paper_word`): ``paper`` (2,708
nodes, their bag-of-words rows as features, labels, the public Planetoid split) and ``word`` (1,433 nodes, one per
feature column, no features of their own), relations ``(paper, cites, paper)`` (symmetric), ``(paper, has_word,
word)`` for every nonzero feature and its reverse ``rev_has_word``. Every run is ``gnndist run`` on P ranks with
the defaults (2 layers of 16, dropout 0.5, lr 0.01, weight decay 5e-4, 200 epochs, row-normalised features), and
reports the test accuracy at the epoch of best validation accuracy:

    gcn              gnndist run cora --model gcn
    rgcn             gnndist run cora-paper-word --model rgcn --embedding zero   (words: their neighbours' mean)
    rgcn-learn       gnndist run cora-paper-word --model rgcn --embedding learn  (words: a learned embedding each)

    python benchmarks/hetero_accuracy.py                      # the three, seeds 0..2, 2 ranks
    python benchmarks/hetero_accuracy.py --models gcn,rgcn --seeds 5 --ranks 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "gcn": ["cora", "--model", "gcn"],
    "rgcn": ["cora-paper-word", "--model", "rgcn", "--embedding", "zero"],
    "rgcn-learn": ["cora-paper-word", "--model", "rgcn", "--embedding", "learn"],
}


def run(model: str, seed: int, ranks: int, data: str) -> dict:
    """One ``gnndist run`` (partition cached under ``data``); its JSON summary."""
    cmd = [sys.executable, "-m", "gnndist.cli", "run", *MODELS[model], "--ranks", str(ranks), "--seed", str(seed),
           "--json", "--no-progress"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env={**os.environ, "GNNDIST_DATA": data})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds 0 .. S-1 (the split is Planetoid's)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--json", help="also write every run to this JSON file")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    acc: dict[str, list[float]] = {}
    runs = []
    with tempfile.TemporaryDirectory(prefix="gnndist-hetero-acc-") as data:
        for model in args.models.split(","):
            for seed in range(args.seeds):
                s = run(model, seed, args.ranks, data)
                acc.setdefault(model, []).append(s["test_acc"])
                runs.append({"model": model, "seed": seed, "ranks": args.ranks, **s})
                print(f"{model:10s} seed {seed}: test {s['test_acc']:.4f} (best epoch {s['best_epoch']}, "
                      f"{s['epoch_time_s']:.2f} s/epoch)  load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\ntest accuracy on Cora's public split, mean ± std over {args.seeds} seeds (%), {args.ranks} ranks")
    base = statistics.mean(acc["gcn"]) if "gcn" in acc else None
    for model, xs in acc.items():
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        gap = f"{100 * (statistics.mean(xs) - base):+.1f}" if base is not None else "-"
        print(f"{model:10s} {100 * statistics.mean(xs):5.1f} ± {100 * sd:.1f}   vs gcn {gap}   "
              f"({', '.join(f'{100 * x:.1f}' for x in xs)})")
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
