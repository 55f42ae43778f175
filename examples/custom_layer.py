"""Write a new GNN layer, train it on Cora on several ranks, and compare with one process.

    .venv/bin/python examples/custom_layer.py --ranks 2 [--epochs 100]

The layer below knows nothing about distribution: ``message`` says what travels along an
edge, ``propagate`` exchanges the halo, aggregates and carries gradients home.
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial

import torch
from torch import Tensor, nn

from gnndist.nn import GNN, MessagePassing, register_model


class GatedConv(MessagePassing):
    r"""Gated mean: :math:`x'_i = W_r x_i + \mathrm{mean}_{j} \sigma(a^\top [h_i \Vert h_j])\, h_j`, :math:`h = W x`."""

    aggr = "mean"

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels)
        self.root = nn.Linear(in_channels, out_channels, bias=False)
        self.gate = nn.Linear(2 * out_channels, 1)

    def message(self, x_i: Tensor, x_j: Tensor) -> Tensor:  # [nnz, out]: one row per edge
        return torch.sigmoid(self.gate(torch.cat([x_i, x_j], dim=-1))) * x_j

    def forward(self, graph, x: Tensor) -> Tensor:
        return self.propagate(graph, self.lin(x)) + self.root(x)  # [n_owned, out]


register_model("gated", partial(GNN, GatedConv))  # now `gnndist run cora --model gated` works too


def train(grid, partdir: str, epochs: int) -> dict:
    """One rank: train, then gather every rank's per-epoch losses and final logits of its owned nodes."""
    import gnndist

    cfg = gnndist.TrainConfig()
    cfg.model.model, cfg.optim.epochs, cfg.run.progress = "gated", epochs, False
    graph = gnndist.DistGraph.load(partdir, grid, normalize_features=True)
    trainer = gnndist.Trainer(graph, cfg)
    summary = trainer.fit()
    trainer.model.eval()
    with torch.no_grad():
        logits = trainer.model(graph, graph.x)  # [n_owned, classes]
    rows = grid.all_gather_object((graph.orig_id[: graph.n_owned], logits))  # every rank's, for rank 0
    return {"test_acc": summary.best.test, "losses": [row["loss"] for row in summary.history], "rows": rows}


def run(ranks: int, epochs: int) -> tuple[dict, torch.Tensor]:
    """Partition Cora into ``ranks`` parts and train on as many ranks; logits in dataset order."""
    from gnndist.datasets import load
    from gnndist.partition import partition

    import gnndist

    data = load("cora")
    with tempfile.TemporaryDirectory() as partdir:
        partition(data, ranks, progress=False).save(partdir, dataset="cora", progress=False)
        result = gnndist.launch(train, partdir, epochs, ranks=ranks)
    logits = torch.empty(data.num_nodes, result["rows"][0][1].shape[1])
    for ids, rows in result["rows"]:
        logits[ids.long()] = rows
    return result, logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    dist, logits_p = run(args.ranks, args.epochs)
    one, logits_1 = run(1, args.epochs)
    loss_diff = max(abs(a - b) for a, b in zip(dist["losses"], one["losses"], strict=True))
    logit_diff = (logits_p - logits_1).abs().max().item() / logits_1.abs().max().item()
    print(f"GatedConv on Cora, {args.epochs} epochs")
    print(f"  {args.ranks} ranks: test acc {dist['test_acc']:.4f}  final loss {dist['losses'][-1]:.6f}")
    print(f"  1 rank : test acc {one['test_acc']:.4f}  final loss {one['losses'][-1]:.6f}")
    print(f"  max |loss difference| over epochs: {loss_diff:.2e}; relative logit difference: {logit_diff:.2e}")


if __name__ == "__main__":
    main()
