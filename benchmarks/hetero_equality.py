"""P ranks equal one on a typed graph: per-epoch losses of each heterogeneous model at P = 2, 3, 4 against P = 1.

On ``synthetic-mag-<N>`` (ogbn-mag's shape; featureless author, institution and field_of_study learn embeddings),
20 epochs with dropout, ``--strategy 1d``, METIS partitions; prints the largest relative per-epoch loss
difference and the final test accuracy of each model and P:

    rgcn            --model rgcn (a weight per relation)
    rgcn-bases      --model rgcn --num-bases 2
    heteroconv      HeteroConv: PyG's GraphConv per relation (PyGAdapter), then gnndist's SAGEConv per relation

    python benchmarks/hetero_equality.py                       # synthetic-mag-2000, P = 1..4, 20 epochs
    python benchmarks/hetero_equality.py --papers 5000 --worlds 1,4
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from torch import nn

import gnndist
from gnndist.nn import HeteroConv, NodeEmbedding, PyGAdapter, SAGEConv


class HeteroSage(nn.Module):
    """Embeddings, PyG GraphConv per relation, ReLU, dropout, gnndist SAGEConv per relation."""

    def __init__(self, graph, f_in: int, f_out: int, hidden: int = 16):
        from torch_geometric.nn import GraphConv

        super().__init__()
        self.embedding = NodeEmbedding(graph, f_in)
        self.conv1 = HeteroConv.per_relation(graph, lambda rel: PyGAdapter(GraphConv(f_in, hidden, aggr="mean")))
        self.conv2 = HeteroConv.per_relation(graph, lambda rel: SAGEConv(hidden, f_out), aggr="mean")

    def forward(self, graph, x):
        h = torch.relu(self.conv1(graph, self.embedding(graph, x)))  # [n_owned, hidden]
        return self.conv2(graph, graph.dropout(h, 0.5, key=1, training=self.training))  # [n_owned, classes]


def train(grid, partdir: str, model: str, epochs: int):
    graph = gnndist.DistGraph.load(partdir, grid)
    cfg = gnndist.TrainConfig()
    cfg.optim.epochs, cfg.run.progress, cfg.model.hidden = epochs, False, 16
    if model == "heteroconv":
        trainer = gnndist.Trainer(graph, cfg, model=lambda f_in, f_out: HeteroSage(graph, f_in, f_out))
    else:
        cfg.model.model, cfg.model.num_bases = "rgcn", 2 if model == "rgcn-bases" else 0
        trainer = gnndist.Trainer(graph, cfg)
    summary = trainer.fit()
    return [row["loss"] for row in summary.history], summary.best.test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=2000)
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--models", default="rgcn,rgcn-bases,heteroconv")
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    from gnndist.datasets import load
    from gnndist.partition import partition

    print(f"load average at start: {os.getloadavg()}", flush=True)
    data = load(f"synthetic-mag-{args.papers}")
    worlds = [int(w) for w in args.worlds.split(",")]
    print(f"synthetic-mag-{args.papers}: {int(data.num_nodes):,} nodes, {len(data.hetero.relations)} relations, "
          f"{len(data.hetero.rel_type):,} relation edges; {args.epochs} epochs")
    print(f"{'model':12s} {'P':>2s} {'max rel. loss diff':>18s} {'test acc':>8s}")
    with tempfile.TemporaryDirectory(prefix="gnndist-hetero-eq-") as tmp:
        dirs = {}
        for w in worlds:
            dirs[w] = os.path.join(tmp, f"p{w}")
            partition(data, w, progress=False).save(dirs[w], dataset=f"synthetic-mag-{args.papers}", progress=False)
        for model in args.models.split(","):
            ref = None
            for w in worlds:
                losses, test = gnndist.launch(train, dirs[w], model, args.epochs, ranks=w)
                ref = ref or losses
                diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref, strict=True))
                print(f"{model:12s} {w:2d} {diff:18.2e} {test:8.4f}", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
