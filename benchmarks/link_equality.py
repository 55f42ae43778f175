"""P-equality of link prediction: per-epoch losses, the first step's gradients and the embedding rows of P ranks
against one process (model x decoder x P), on a synthetic graph with a random edge split.

    .venv/bin/python benchmarks/link_equality.py [--epochs 20] [--ranks 2,3,4] [--nodes 2000]

Prints one row per (model, decoder, edge batch, P): the largest relative per-epoch loss difference, the largest
gradient difference over the largest gradient entry, and (featureless rows) the learned rows' relative
difference after the run. Dropout 0.5 on the encoder (its masks are partition-invariant).
"""

from __future__ import annotations

import argparse
import tempfile

import torch

CASES = [  # (model, decoder, edge batch, featureless)
    ("gcn", "dot", 0, False), ("gcn", "mlp", 0, False), ("sage", "dot", 0, False), ("sage", "mlp", 0, False),
    ("gcn", "mlp", 4096, False), ("sage", "dot", 0, True),
]


def job(grid, partdir: str, case: tuple, epochs: int) -> dict:
    from gnndist.config import TrainConfig
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    model, decoder, batch, _ = case
    cfg = TrainConfig()
    cfg.model.model, cfg.model.hidden, cfg.model.dropout, cfg.model.normalize_features = model, 32, 0.5, False
    cfg.task.task, cfg.task.decoder, cfg.task.edge_batch = "link", decoder, batch
    cfg.optim.epochs, cfg.run.progress = epochs, False
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, cfg)
    losses, grads = [], None
    for epoch in range(epochs):
        with graph.context.step(seed=0, epoch=epoch):
            losses.append(trainer.train_step(epoch))
        if grads is None:
            grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()
                     if p.grad is not None and id(p) not in {id(q) for q in trainer.sharded}}
    emb = trainer.model.embedding
    return dict(losses=losses, grads=grads,
                rows=(emb.ids.clone(), emb.weight.detach().clone()) if emb is not None else None)


def main() -> None:
    from gnndist.datasets import synthetic
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split
    from gnndist.partition import partition

    from gnndist.testing import run_distributed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--nodes", type=int, default=2000)
    args = ap.parse_args()
    worlds = [1] + [int(p) for p in args.ranks.split(",")]
    print("| model | decoder | edge batch | featureless | P | losses (max rel) | gradients (max / max) | rows |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for featureless in (False, True):
        data = synthetic(args.nodes, avg_degree=10, num_classes=4, num_features=16, seed=7)
        set_edge_split(data, *random_edge_split(data.edge_index, args.nodes, (0.85, 0.05, 0.10), seed=1))
        if featureless:
            data.x = torch.zeros(args.nodes, 0)
        dirs = {}
        for p in worlds:
            dirs[p] = tempfile.mkdtemp(prefix=f"link-eq-p{p}-")
            partition(data, p, progress=False).save(dirs[p], dataset="synthetic-link", progress=False)
        for case in (c for c in CASES if c[3] == featureless):
            out = {p: run_distributed(job, p, dirs[p], case, args.epochs) for p in worlds}
            one = out[1][0]
            ref = torch.tensor(one["losses"], dtype=torch.float64)
            scale = max(g.abs().max().item() for g in one["grads"].values())
            for p in worlds[1:]:
                loss = max((torch.tensor(r["losses"], dtype=torch.float64) - ref).abs().max().item()
                           / ref.abs().max().item() for r in out[p])
                grad = max((r["grads"][n] - g).abs().max().item() for r in out[p] for n, g in one["grads"].items())
                rows = "-"
                if featureless:
                    ids1, rows1 = one["rows"]
                    full = torch.empty_like(rows1)
                    for r in out[p]:
                        full[r["rows"][0]] = r["rows"][1]
                    ref_rows = rows1[torch.argsort(ids1)]
                    rows = f"{((full - ref_rows).abs().max() / ref_rows.abs().max()).item():.1e}"
                print(f"| {case[0]} | {case[1]} | {case[2] or 'all'} | {featureless} | {p} | {loss:.1e} | "
                      f"{grad / scale:.1e} | {rows} |", flush=True)


if __name__ == "__main__":
    main()
