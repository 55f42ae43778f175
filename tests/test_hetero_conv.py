"""HeteroConv (issue 34, part 3): a layer per relation (gnndist layers and PyGAdapter-wrapped PyG convs, mixed),
summed per destination type, on P = 2 and 4 ranks equal to one process (losses, gradients, embedding rows), and
its one-line refusals."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gnndist.config import TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.nn import GCNConv, HeteroConv, NodeEmbedding, PyGAdapter, SAGEConv
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import Trainer

EPOCHS = 4
WORLDS = (1, 4)  # 2 ranks proved nothing 4 do not


def _layer(rel, i, o):
    """Per relation: PyG's GCNConv inside one type, gnndist's SAGEConv for writes, PyG's SAGEConv or GraphConv else."""
    from torch_geometric.nn import GCNConv as PyGGCN
    from torch_geometric.nn import GraphConv
    from torch_geometric.nn import SAGEConv as PyGSAGE

    src, name, dst = rel
    if src == dst:
        return PyGAdapter(PyGGCN(i, o))
    if name.endswith("writes"):
        return SAGEConv(i, o)
    return PyGAdapter(PyGSAGE(i, o) if name.startswith("rev_") else GraphConv(i, o, aggr="mean"))


class Net(nn.Module):
    """Embeddings for the featureless types, then two HeteroConv layers (the second gnndist-only, GCN on cites)."""

    def __init__(self, graph, f_in, f_out, hidden=8):
        super().__init__()
        self.embedding = NodeEmbedding(graph, f_in)
        self.conv1 = HeteroConv.per_relation(graph, lambda rel: _layer(rel, f_in, hidden))
        self.conv2 = HeteroConv.per_relation(
            graph, lambda rel: GCNConv(hidden, f_out) if rel[0] == rel[2] else SAGEConv(hidden, f_out), aggr="mean")

    def forward(self, graph, x):
        x = self.embedding(graph, x)  # [n_owned, F]
        h = F.relu(self.conv1(graph, x))  # [n_owned, hidden]
        return self.conv2(graph, graph.dropout(h, 0.5, key=1, training=self.training))  # [n_owned, classes]


def _cfg(epochs=EPOCHS):
    cfg = TrainConfig()
    cfg.model.normalize_features, cfg.optim.epochs, cfg.run.progress = False, epochs, False
    return cfg


def _rank_job(grid, partdir):
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, _cfg(), model=lambda f_in, f_out: Net(graph, f_in, f_out))
    trainer.fit()
    out = dict(losses=[row["loss"] for row in trainer.history])
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, _cfg(0), model=lambda f_in, f_out: Net(graph, f_in, f_out))
    trainer.model.eval()  # no dropout: one step's gradients
    logits = trainer.model(graph, graph.x)
    trainer.task.objective(logits).backward()
    trainer.allreduce_grads()
    emb = trainer.model.embedding
    out.update(grads={n: p.grad.clone() for n, p in trainer.model.named_parameters() if "embedding" not in n},
               emb_grad=emb.weight.grad.clone(), emb_ids=emb.ids.clone(), logits=logits.detach(),
               ids=graph.orig_id[: graph.n_owned].clone())
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gnndist.datasets.hetero import from_hetero, synthetic_mag
    from gnndist.partition import partition

    hd = synthetic_mag(120, num_classes=4, num_features=6, seed=3)
    hd["venue"].num_nodes = 3
    hd["paper", "in_venue", "venue"].edge_index = torch.zeros(2, 0, dtype=torch.long)  # an empty relation runs
    data = from_hetero(hd, "toy-mag")
    out = {}
    for world in WORLDS:
        d = tmp_path_factory.mktemp(f"hc{world}")
        partition(data, world, progress=False, **QUICK_PARTITION).save(d, dataset="toy-mag", progress=False)
        out[world] = run_distributed(_rank_job, world, str(d))
    return data, out


def _gathered(ranks, ids_key, key):
    ids = torch.cat([r[ids_key] for r in ranks])
    return torch.cat([r[key] for r in ranks])[torch.argsort(ids)]


@pytest.mark.parametrize("world", WORLDS[1:])
def test_hetero_conv_equals_one_process(runs, world):
    _, results = runs
    one, many = results[1][0], results[world]
    ref = torch.tensor(one["losses"], dtype=torch.float64)
    assert ref[-1] < ref[0]  # it trains
    for r in many:
        assert_close(f"losses P={world}", ref, torch.tensor(r["losses"], dtype=torch.float64), rtol=1e-5)
        for name, g in one["grads"].items():
            assert_close(f"grad {name}", g, r["grads"][name], rtol=1e-5, atol=1e-8)
    assert_close("logits", _gathered(results[1], "ids", "logits"), _gathered(many, "ids", "logits"), rtol=1e-5)
    emb = _gathered(many, "emb_ids", "emb_grad")
    assert_close("embedding grad", _gathered(results[1], "emb_ids", "emb_grad"), emb, rtol=1e-5, atol=1e-9)
    assert float(emb.abs().sum()) > 0  # the featureless rows' gradients reached their owners


def test_rows_of_other_types_are_not_written(runs):
    """A relation's layer counts at its destination type only: a type that is no relation's destination is zero."""
    data, results = runs
    logits = _gathered(results[1], "ids", "logits")
    types = data.hetero.node_types
    off = data.hetero.offsets
    for t, name in enumerate(types):
        rows = logits[off[t] : off[t + 1]]
        pointed = any(d == name for _, _, d in data.hetero.relations)
        assert pointed == bool(rows.abs().sum() > 0), name


def _solo_graph(tmp_path):
    from gnndist.datasets.hetero import from_hetero, synthetic_mag
    from gnndist.partition import partition

    partition(from_hetero(synthetic_mag(40, num_features=4, seed=1), "toy"), 1, progress=False).save(
        tmp_path, dataset="toy", progress=False)
    return DistGraph.load(tmp_path, ProcessGrid())


def test_refusals(tmp_path):
    graph = _solo_graph(tmp_path)
    x = graph.x
    with pytest.raises(ValueError, match=r"not relations of the graph"):
        HeteroConv({("paper", "in", "journal"): SAGEConv(4, 2)})(graph, x)
    with pytest.raises(ValueError, match=r"weight='gcn' .* on relation \(author, writes, paper\) between two node"):
        HeteroConv({("author", "writes", "paper"): GCNConv(4, 2)})(graph, x)
    with pytest.raises(ValueError, match="aggr must be 'sum' or 'mean'"):
        HeteroConv({}, aggr="max")
