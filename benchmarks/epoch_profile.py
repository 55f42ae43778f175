"""Where one full-graph epoch goes: step time, evaluation time and torch.profiler's top ops, dense or sparse input.

    python benchmarks/epoch_profile.py coauthor-cs --root ../shared/data [--model sage] [--hidden 256]
        [--dropout P] [--sparse-features off,on] [--threads 2] [--top 12]

For each ``--sparse-features`` value: a one-rank Trainer on a 1-part partition (kept under ``--work``), two warm-up
steps, the median of ``--reps`` training steps (``Trainer.train_step``), one evaluation forward, then one profiled
step's top ops by self CPU time. Prints JSON lines (``kind: step`` and ``kind: op``) with the load average.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from gnndist.datasets import load
from gnndist.partition import load as load_part
from gnndist.partition import partition

from gnndist.bench.common import loadavg
from gnndist.config import TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION
from gnndist.training.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--root", default=None)
    ap.add_argument("--model", default="sage")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=None, help="the model's dropout (default: the config's)")
    ap.add_argument("--sparse-features", default="off,on")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--work", default="/tmp/gnndist-epoch-profile")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    part = Path(args.work) / f"{args.dataset}-p1"
    if not (part / "META.json").exists():
        partition(load(args.dataset, root=args.root), 1, progress=False, **QUICK_PARTITION).save(
            part, dataset=args.dataset, progress=False)
    for sparse in args.sparse_features.split(","):
        cfg = TrainConfig()
        cfg.model.model, cfg.model.hidden, cfg.model.layers, cfg.model.sparse_features = (
            args.model, args.hidden, args.layers, sparse)
        if args.dropout is not None:
            cfg.model.dropout = args.dropout
        cfg.run.progress = False
        graph = DistGraph.from_config(*load_part(part, 0), ProcessGrid(), cfg)
        trainer = Trainer(graph, cfg)

        def step(epoch: int) -> float:
            with graph.context.step(seed=0, epoch=epoch):
                t0 = time.perf_counter()
                trainer.train_step(epoch)
                return time.perf_counter() - t0

        for e in range(2):
            step(e)
        times = [step(e) for e in range(2, 2 + args.reps)]
        t0 = time.perf_counter()
        trainer.evaluate()
        eval_s = time.perf_counter() - t0
        print(json.dumps({"kind": "step", "dataset": args.dataset, "model": args.model, "hidden": args.hidden,
                          "dropout": cfg.model.dropout, "sparse_features": sparse,
                          "taken_sparse": bool(graph.sparse_features),
                          "step_s": round(statistics.median(times), 4), "eval_s": round(eval_s, 4),
                          "threads": args.threads, "load": loadavg()}), flush=True)
        with torch.profiler.profile() as prof:
            step(99)
        ops = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[: args.top]
        total = sum(a.self_cpu_time_total for a in prof.key_averages())
        for a in ops:
            print(json.dumps({"kind": "op", "sparse_features": sparse, "op": a.key, "calls": a.count,
                              "self_ms": round(a.self_cpu_time_total / 1e3, 1),
                              "share": round(a.self_cpu_time_total / total, 3)}), flush=True)


if __name__ == "__main__":
    main()
