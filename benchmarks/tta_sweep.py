"""gnndist's side of ``gnndist bench tta`` over other hyper-parameters (lr, width, dropout, weight decay), alone.

    python benchmarks/tta_sweep.py amazon-photo --root ../shared/data --target 0.9326 --budget-s 60 \
        --max-epochs 400 --after-target 50 --seeds 0,1,2 --configs lr=0.003 lr=0.01 lr=0.03 lr=0.1

Exports the dataset's problem as the suite does (seed 0 split), trains gnndist's 2-layer SAGE (the suite's
default: h256, dropout 0.5, no weight decay; ``--model``/``--layers`` for another) for ``--budget-s`` training
seconds or ``--max-epochs`` per config and seed (or ``--after-target`` epochs after it first reached the target),
with the suite's clock and evaluator, and prints one JSON line per run: time, epochs and steps to ``--target`` (a T
from a suite run), best validation, test at best validation, s/epoch, load; then one line per config with the
medians over seeds.

Epochs to T do not depend on the machine's load (the training is deterministic per seed); seconds do. A
full-graph step's cost does not depend on the learning rate, so ranking learning rates by epochs to T is ranking
them by time to T at one width.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import torch

from gnndist.bench.tta import Evaluators, export_problem, gnndist_partition, load_graph, load_problem, run_gnndist
from gnndist.bench.tta_protocol import Hyper, at_best_val, time_to

FIELDS = {"lr": float, "hidden": int, "dropout": float, "weight_decay": float, "wd": float}


def parse_config(text: str, base: Hyper) -> Hyper:
    """``lr=0.03,hidden=64`` -> ``base`` with those fields replaced."""
    given = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in FIELDS:
            raise SystemExit(f"tta_sweep: {key!r} is not one of {', '.join(FIELDS)}")
        given["weight_decay" if key == "wd" else key] = FIELDS[key](value)
    return dataclasses.replace(base, **given)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--root", default=None)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--budget-s", type=float, default=60.0)
    ap.add_argument("--max-epochs", type=int, default=100_000)
    ap.add_argument("--after-target", type=int, default=None,
                    help="stop a run this many epochs after it first reaches --target (default: run the budget)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--model", default="sage")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--configs", nargs="+", default=["lr=0.01", "lr=0.03"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = Hyper(args.model, args.layers, 256, 0.5, 0.01, 0.0)
    hypers = [(text, parse_config(text, base)) for text in args.configs]
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as work:
        problem = load_problem(export_problem(args.dataset, args.root, 0, work))
        graph = load_graph(gnndist_partition(problem, Path(work) / "part")[0])
        evaluators = Evaluators(graph)

        def until(run) -> bool:
            hit = time_to(run.points, args.target)
            return args.after_target is not None and hit is not None and run.epochs - hit.epoch >= args.after_target
        for text, hyper in hypers:
            rows = []
            for seed in seeds:
                run = run_gnndist(graph, evaluators(hyper), hyper, seed, args.budget_s, args.max_epochs, until)
                hit, best = time_to(run.points, args.target), at_best_val(run.points)
                rows.append({"dataset": args.dataset, "config": text, "hyper": hyper.label(), "seed": seed,
                             "target": args.target, "time_to_T_s": hit and round(hit.train_s, 2),
                             "epochs_to_T": hit and hit.epoch, "steps_to_T": hit and hit.steps,
                             "epochs": run.epochs, "best_val": round(best.val, 4),
                             "test_at_best_val": round(best.test, 4), "s_per_epoch": round(run.s_per_epoch, 4),
                             "load": [run.load_start, run.load_end]})
                print(json.dumps(rows[-1]), flush=True)
            print(json.dumps({"dataset": args.dataset, "config": text, "hyper": hyper.label(), "seeds": len(rows),
                              "reached": sum(r["epochs_to_T"] is not None for r in rows),
                              **{f"median_{k}": median([r[k] for r in rows]) for k in
                                 ("time_to_T_s", "epochs_to_T", "best_val", "test_at_best_val", "s_per_epoch")}}),
                  flush=True)


if __name__ == "__main__":
    main()
