"""A heterogeneous model of your own: a layer per relation with HeteroConv, on 2 ranks, compared with one process.

    .venv/bin/python examples/hetero_layer.py [--ranks 2] [--epochs 20] [--papers 1000]

``synthetic-mag-<N>`` has ogbn-mag's shape (paper, author, institution, field_of_study; only papers have
features and labels). ``HeteroConv`` runs one layer per relation (``rev_`` relations included) on
``graph.relation(r)`` and sums per destination type; any gnndist layer or a ``torch_geometric.nn`` conv in
``PyGAdapter`` can be the per-relation layer. The featureless types learn a ``NodeEmbedding`` (each rank its
own rows).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

import gnndist
from gnndist.nn import HeteroConv, NodeEmbedding, PyGAdapter, SAGEConv


# ---------------------------------------------------------------------- the user's code (about 20 lines)
class TwoHop(nn.Module):
    """Embeddings for featureless types, PyG's GraphConv per relation, then gnndist's SAGEConv per relation."""

    def __init__(self, graph, in_channels: int, out_channels: int, hidden: int = 32):
        from torch_geometric.nn import GraphConv

        super().__init__()
        self.embedding = NodeEmbedding(graph, in_channels)
        self.conv1 = HeteroConv.per_relation(graph, lambda rel: PyGAdapter(GraphConv(in_channels, hidden, aggr="mean")))
        self.conv2 = HeteroConv.per_relation(graph, lambda rel: SAGEConv(hidden, out_channels), aggr="mean")

    def forward(self, graph, x):
        h = torch.relu(self.conv1(graph, self.embedding(graph, x)))  # [n_owned, hidden]
        return self.conv2(graph, graph.dropout(h, 0.5, key=1, training=self.training))  # [n_owned, classes]


def train(grid, partdir: str, epochs: int):
    graph = gnndist.DistGraph.load(partdir, grid)
    cfg = gnndist.TrainConfig()
    cfg.optim.epochs, cfg.run.progress = epochs, False
    trainer = gnndist.Trainer(graph, cfg, model=lambda f_in, f_out: TwoHop(graph, f_in, f_out))
    summary = trainer.fit()
    return [row["loss"] for row in summary.history], summary.best.test
# ----------------------------------------------------------------------


def run(ranks: int, epochs: int, papers: int) -> tuple[list[float], float]:
    """Partition synthetic-mag-<papers> into ``ranks`` parts and train on as many ranks."""
    from gnndist.datasets import load
    from gnndist.partition import partition

    with tempfile.TemporaryDirectory() as partdir:
        partition(load(f"synthetic-mag-{papers}"), ranks, progress=False).save(partdir, dataset="synthetic-mag",
                                                                               progress=False)
        return gnndist.launch(train, partdir, epochs, ranks=ranks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--papers", type=int, default=1000)
    args = ap.parse_args()
    losses_p, test_p = run(args.ranks, args.epochs, args.papers)
    losses_1, test_1 = run(1, args.epochs, args.papers)
    diff = max(abs(a - b) / abs(b) for a, b in zip(losses_p, losses_1, strict=True))
    print(f"TwoHop on synthetic-mag-{args.papers}, {args.epochs} epochs: {args.ranks} ranks test acc {test_p:.4f}, "
          f"1 rank {test_1:.4f}; max relative per-epoch loss difference {diff:.2e}")


if __name__ == "__main__":
    main()
