"""Train a link predictor with your own edge decoder on 2 ranks, and compare with one process.

    .venv/bin/python examples/custom_decoder.py [--ranks 2] [--epochs 100]

Cora's edges are split 85 / 5 / 10 (validation and test edges leave the message graph); the encoder is a
2-layer GCN; the decoder, below, is a DistMult-style bilinear score. It sees the two endpoint rows of each
pair: gnndist brings them from whichever ranks own them and sends their gradients back, so the numbers are
those of one process.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

import gnndist
from gnndist.nn import GNN, GCNConv, LinkModel


# ---------------------------------------------------------------------- the user's code (about 10 lines)
class Bilinear(nn.Module):
    """``score(u, v) = sum_k h_u[k] r[k] h_v[k] + b``: a learned weight per dimension (DistMult)."""

    def __init__(self, width: int):
        super().__init__()
        self.r, self.b = nn.Parameter(torch.ones(width)), nn.Parameter(torch.zeros(()))

    def forward(self, hu, hv):  # [n, d] each -> [n]
        return (hu * self.r * hv).sum(dim=-1) + self.b


def train(grid, partdir: str, epochs: int):
    graph = gnndist.DistGraph.load(partdir, grid, normalize_features=True)
    cfg = gnndist.TrainConfig()
    cfg.task.task, cfg.model.dropout, cfg.optim.weight_decay = "link", 0.0, 0.0
    cfg.optim.epochs, cfg.run.progress = epochs, False
    model = lambda f_in, f_out: LinkModel(GNN(GCNConv, f_in, 32, 16, layers=2, dropout=0.0), Bilinear(16))  # noqa: E731
    summary = gnndist.Trainer(graph, cfg, model=model).fit()
    return [row["loss"] for row in summary.history], summary.best.test
# ----------------------------------------------------------------------


def run(ranks: int, epochs: int) -> tuple[list[float], float]:
    """Split Cora's edges, partition it into ``ranks`` parts and train on as many ranks."""
    from gnndist.datasets import load
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split
    from gnndist.partition import partition

    data = load("cora")
    set_edge_split(data, *random_edge_split(data.edge_index, data.num_nodes, (0.85, 0.05, 0.10), seed=0))
    with tempfile.TemporaryDirectory() as partdir:
        partition(data, ranks, progress=False).save(partdir, dataset="cora", progress=False)
        return gnndist.launch(train, partdir, epochs, ranks=ranks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    losses_p, test_p = run(args.ranks, args.epochs)
    losses_1, test_1 = run(1, args.epochs)
    diff = max(abs(a - b) / abs(b) for a, b in zip(losses_p, losses_1, strict=True))
    print(f"GCN + bilinear decoder on Cora's edges, {args.epochs} epochs: {args.ranks} ranks test AUC {test_p:.4f}, "
          f"1 rank {test_1:.4f}; max relative per-epoch loss difference {diff:.2e}")


if __name__ == "__main__":
    main()
