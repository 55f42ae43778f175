"""Train your own model (not a registered one) on 2 ranks with the Python API, and compare with one process.

    .venv/bin/python examples/custom_model.py [--ranks 2] [--epochs 50]

The model is plain PyTorch around gnndist layers: ``forward(graph, x)`` gets the rank's
:class:`~gnndist.DistGraph`; ``gnndist.launch`` starts the ranks (``torchrun`` works unchanged).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

import gnndist
from gnndist.nn import GCNConv, SAGEConv


# ---------------------------------------------------------------------- the user's code (about 20 lines)
class JumpNet(nn.Module):
    """GCN then SAGE, their outputs concatenated (a jumping-knowledge head), dropout between."""

    def __init__(self, in_channels: int, out_channels: int, hidden: int = 32):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_channels, hidden), SAGEConv(hidden, hidden)
        self.head = nn.Linear(2 * hidden, out_channels)

    def forward(self, graph, x):
        h1 = torch.relu(self.conv1(graph, graph.dropout(x, 0.5, key=1, training=self.training)))
        h2 = torch.relu(self.conv2(graph, graph.dropout(h1, 0.5, key=2, training=self.training)))
        return self.head(torch.cat([h1, h2], dim=1))  # [n_owned, classes]


def train(grid, partdir: str, epochs: int):
    graph = gnndist.DistGraph.load(partdir, grid, normalize_features=True)
    cfg = gnndist.TrainConfig()
    cfg.optim.epochs, cfg.run.progress = epochs, False
    trainer = gnndist.Trainer(graph, cfg, model=JumpNet)  # JumpNet(in_channels, out_channels)
    summary = trainer.fit()
    return [row["loss"] for row in summary.history], summary.best.test
# ----------------------------------------------------------------------


def run(ranks: int, epochs: int) -> tuple[list[float], float]:
    """Partition Cora into ``ranks`` parts and train on as many ranks."""
    from gnndist.datasets import load
    from gnndist.partition import partition

    with tempfile.TemporaryDirectory() as partdir:
        partition(load("cora"), ranks, progress=False).save(partdir, dataset="cora", progress=False)
        return gnndist.launch(train, partdir, epochs, ranks=ranks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=50)
    args = ap.parse_args()
    losses_p, test_p = run(args.ranks, args.epochs)
    losses_1, test_1 = run(1, args.epochs)
    diff = max(abs(a - b) / abs(b) for a, b in zip(losses_p, losses_1, strict=True))
    print(f"JumpNet on Cora, {args.epochs} epochs: {args.ranks} ranks test acc {test_p:.4f}, 1 rank {test_1:.4f}; "
          f"max relative per-epoch loss difference {diff:.2e}")


if __name__ == "__main__":
    main()
