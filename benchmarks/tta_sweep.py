"""gnndist's side of ``gnndist bench tta`` at other weight decays and learning rates, on the suite's own problem.

    python benchmarks/tta_weight_decay.py amazon-photo --root ../shared/data --target 0.9313 --budget-s 90 \
        --configs 0:0.01,0:0.03,5e-4:0.01

Exports the dataset's problem as the suite does (seed 0 split), trains gnndist's 2-layer SAGE h256 (dropout 0.5)
for ``--budget-s`` training seconds per ``WEIGHT_DECAY:LR`` config with the suite's clock and evaluator, and prints
one JSON line per config: time and epochs to ``--target`` (a T from a suite run), best validation, test at best
validation, s/epoch, load. The suite's defaults gave gnndist weight decay 5e-4 where the peers use 0.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from gnndist.bench.tta import Evaluators, export_problem, gnndist_partition, load_graph, load_problem, run_gnndist
from gnndist.bench.tta_protocol import Hyper, at_best_val, time_to


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--root", default=None)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--budget-s", type=float, default=90.0)
    ap.add_argument("--configs", default="0:0.01,0:0.03,5e-4:0.01")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        problem = load_problem(export_problem(args.dataset, args.root, 0, work))
        graph = load_graph(gnndist_partition(problem, Path(work) / "part")[0])
        evaluators = Evaluators(graph)
        for config in args.configs.split(","):
            wd, lr = (float(v) for v in config.split(":"))
            hyper = Hyper("sage", 2, 256, 0.5, lr, wd)
            run = run_gnndist(graph, evaluators(hyper), hyper, 0, args.budget_s, 100_000)
            hit, best = time_to(run.points, args.target), at_best_val(run.points)
            print(json.dumps({"dataset": args.dataset, "weight_decay": wd, "lr": lr, "target": args.target,
                              "time_to_T_s": hit and round(hit.train_s, 1), "epochs_to_T": hit and hit.epoch,
                              "best_val": round(best.val, 4), "test_at_best_val": round(best.test, 4),
                              "s_per_epoch": round(run.s_per_epoch, 3), "load": [run.load_start, run.load_end]}),
                  flush=True)


if __name__ == "__main__":
    main()
