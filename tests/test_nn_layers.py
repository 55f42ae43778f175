"""Every built-in and adapted layer on P ranks equals the single-process PyG layer with the same weights.

Outputs, the gradient of the input and every parameter gradient are compared within 1e-5
relative. Ranks are spawned once per world size; each rank runs every case. GAT with
attention dropout is compared across P (masks are partition-invariant) and without
dropout against PyG. GCN over edge weights (``--edge-weights``: the partition's ``edge_weight``) is compared with
PyG's ``GCNConv`` given the same weights.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch_geometric.nn as pyg_nn
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition
from torch import Tensor, nn

import gnndist.nn as gnn
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed

F_IN = 7
WORLD_SIZES = (1, 3)  # 3 ranks: each with halo rows from two others (2 and 4 proved nothing more; 2 cores)


class EdgeMLP(gnn.MessagePassing):
    """A custom layer on the edge path: ``max_j mlp([x_i, x_j - x_i])`` (PyG's ``EdgeConv``)."""

    aggr = "max"

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.nn = mlp

    def message(self, x_i: Tensor, x_j: Tensor) -> Tensor:
        return self.nn(torch.cat([x_i, x_j - x_i], dim=-1))

    def forward(self, graph, x):
        return self.propagate(graph, x)


class NormLinear(gnn.MessagePassing):
    """A custom layer on the fused path: ``D^-1/2 (A + I) D^-1/2 x W + b`` (PyG's ``GCNConv``)."""

    def __init__(self, i: int, o: int):
        super().__init__()
        self.lin = nn.Linear(i, o, bias=False)
        self.bias = nn.Parameter(torch.randn(o))

    def forward(self, graph, x):
        return self.propagate(graph, self.lin(x), edge_weight="gcn") + self.bias


class Mean(gnn.MessagePassing):
    """The default message with mean aggregation (PyG's ``SimpleConv(aggr="mean")``)."""

    aggr = "mean"

    def forward(self, graph, x):
        return self.propagate(graph, x)


class SoftmaxGate(gnn.MessagePassing):
    """Softmax aggregation of a message that reads both endpoints, against PyG's softmax aggregation."""

    aggr = "softmax"

    def message(self, x_i: Tensor, x_j: Tensor) -> Tensor:
        return x_j * torch.sigmoid(x_i)

    def forward(self, graph, x):
        return self.propagate(graph, x, t=0.5)


class PyGSoftmaxGate(pyg_nn.MessagePassing):
    def __init__(self):
        super().__init__(aggr=pyg_nn.aggr.SoftmaxAggregation(t=0.5))

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def message(self, x_i, x_j):
        return x_j * torch.sigmoid(x_i)


def _copy(src: nn.Module, dst: nn.Module, prefix: str = "") -> nn.Module:
    """Copy ``src``'s parameters into ``dst`` by name (``dst`` names may carry ``prefix``)."""
    params = dict(src.named_parameters())
    for name, p in dst.named_parameters():
        p.data.copy_(params[name.removeprefix(prefix)].data)
    return dst


def _mlp(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, 8), nn.ReLU(), nn.Linear(8, o))


def _case(name: str):
    """``(pyg_layer or None, our_layer, param-name prefix of ours, extra node inputs)`` with seeded weights."""
    torch.manual_seed(sum(map(ord, name)))
    kind, extra = name.split("/")[0], ()
    if kind == "gat_h2_concat":
        pyg = pyg_nn.GATConv(F_IN, 4, heads=2)
        return pyg, _copy(pyg, gnn.GATConv(F_IN, 4, heads=2)), "", extra
    if kind == "gat_h3_mean":
        pyg = pyg_nn.GATConv(F_IN, 5, heads=3, concat=False, negative_slope=0.1)
        return pyg, _copy(pyg, gnn.GATConv(F_IN, 5, heads=3, concat=False, negative_slope=0.1)), "", extra
    if kind == "gat_dropout":  # the weights of gat_h2_concat, attention dropout on
        pyg = _case("gat_h2_concat")[0]
        return None, _copy(pyg, gnn.GATConv(F_IN, 4, heads=2, dropout=0.5)), "", extra
    if kind == "gat_model":  # the registered Cora recipe: input and attention dropout, ELU, 2 layers
        return None, gnn.build_model("gat", F_IN, 16, 3, 2, 0.6), "", extra
    if kind == "gen_learn_t_batchnorm":
        pyg = pyg_nn.GENConv(F_IN, 6, learn_t=True, t=0.7)
        return pyg, _copy(pyg, gnn.GENConv(F_IN, 6, learn_t=True, t=0.7)), "", extra
    if kind == "gen_same_width":
        pyg = pyg_nn.GENConv(F_IN, F_IN, norm=None, num_layers=3)
        return pyg, _copy(pyg, gnn.GENConv(F_IN, F_IN, norm=None, num_layers=3)), "", extra
    if kind == "custom_edge_max":
        pyg = pyg_nn.EdgeConv(_mlp(2 * F_IN, 5), aggr="max")
        return pyg, _copy(pyg, EdgeMLP(_mlp(2 * F_IN, 5))), "", extra
    if kind == "custom_fused_gcn":
        pyg = pyg_nn.GCNConv(F_IN, 5)
        return pyg, _copy(pyg, NormLinear(F_IN, 5)), "", extra
    if kind == "gcn_edge_weights":  # gnndist's GCNConv on the graph loaded with --edge-weights
        pyg = pyg_nn.GCNConv(F_IN, 5)
        return pyg, _copy(pyg, gnn.GCNConv(F_IN, 5)), "", extra
    if kind in ("gcn_map_first", "gcn_aggregate_first"):  # gnndist's own GCNConv, both orders: PyG's numbers
        pyg = pyg_nn.GCNConv(F_IN, 5)
        return pyg, _copy(pyg, gnn.GCNConv(F_IN, 5, aggregate_first=kind == "gcn_aggregate_first")), "", extra
    if kind == "custom_mean":
        return pyg_nn.SimpleConv(aggr="mean"), Mean(), "", extra
    if kind == "custom_softmax":
        return PyGSoftmaxGate(), SoftmaxGate(), "", extra
    pyg = {
        "pyg_gcn": lambda: pyg_nn.GCNConv(F_IN, 5),
        "pyg_gcn_improved": lambda: pyg_nn.GCNConv(F_IN, 5, improved=True),
        "pyg_sage": lambda: pyg_nn.SAGEConv(F_IN, 5),
        "pyg_sage_max": lambda: pyg_nn.SAGEConv(F_IN, 5, aggr="max"),
        "pyg_gat": lambda: pyg_nn.GATConv(F_IN, 3, heads=2),
        "pyg_gin": lambda: pyg_nn.GINConv(_mlp(F_IN, 5), train_eps=True),
        "pyg_gen": lambda: pyg_nn.GENConv(F_IN, 5, learn_t=True, norm=None),
        "pyg_gcn2": lambda: pyg_nn.GCN2Conv(F_IN, alpha=0.2, theta=0.5, layer=2),
    }[kind]()
    if kind == "pyg_gcn2":
        extra = ("x_0",)
    return pyg, gnn.PyGAdapter(copy.deepcopy(pyg)), "conv.", extra


CASES = ["gat_h2_concat", "gat_h3_mean", "gat_dropout", "gat_model", "gen_learn_t_batchnorm", "gen_same_width",
         "custom_edge_max", "custom_fused_gcn", "gcn_map_first", "gcn_aggregate_first", "custom_mean",
         "custom_softmax", "gcn_edge_weights",
         "pyg_gcn", "pyg_gcn_improved", "pyg_sage", "pyg_sage_max", "pyg_gat", "pyg_gin", "pyg_gen", "pyg_gcn2"]
WITH_PYG = [c for c in CASES if c not in ("gat_dropout", "gat_model")]


def _edge_weight(src: Tensor, dst: Tensor) -> Tensor:
    """A symmetric weight per edge, 0.5 to 3.5, from its endpoints (the dataset's ``edge_weight``, PyG's)."""
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    return 0.5 + ((lo * 31 + hi * 17) % 7).float() / 2


def _rank_job(grid, partdir, weights):
    """Every case on this rank: owned outputs, input gradient, this rank's share of the parameter gradients."""
    plain = DistGraph.load(partdir, grid)
    weighted = DistGraph.load(partdir, grid, edge_weights=True)  # the same part, its edge weights read
    owned = plain.orig_id[: plain.n_owned].long()
    results = {}
    for name in CASES:
        graph = weighted if name == "gcn_edge_weights" else plain
        _, layer, _, extra = _case(name)
        x = graph.x.clone().requires_grad_(True)  # [n_owned, F_IN]
        with graph.context.step(epoch=3):
            out = layer(graph, x, **{k: x for k in extra})
            (out * weights[owned, : out.shape[1]]).sum().backward()
        grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
        results[name] = {"ids": owned, "out": out.detach(), "x_grad": x.grad, "grads": grads}
    return results


def _gather(per_rank: list[dict], name: str, n: int) -> dict:
    """Outputs and input gradients in dataset order; parameter gradients summed over ranks."""
    first = per_rank[0][name]
    out = first["out"].new_zeros((n,) + tuple(first["out"].shape[1:]))
    x_grad = first["x_grad"].new_zeros((n, first["x_grad"].shape[1]))
    for r in per_rank:
        out[r[name]["ids"]] = r[name]["out"]
        x_grad[r[name]["ids"]] = r[name]["x_grad"]
    grads = {k: sum(r[name]["grads"][k] for r in per_rank) for k in first["grads"]}
    # the size of what was summed across ranks: a gradient that cancels across ranks (a scalar
    # like GENConv's temperature) can only be compared to this, not to its own small value
    grads_abs = {k: sum(r[name]["grads"][k].abs() for r in per_rank) for k in first["grads"]}
    return {"out": out, "x_grad": x_grad, "grads": grads, "grads_abs": grads_abs}


def _reference(name: str, data, edge_index: Tensor, weights: Tensor) -> dict:
    pyg, _, prefix, extra = _case(name)
    x = data.x.clone().requires_grad_(True)
    kw = {"edge_weight": _edge_weight(*edge_index)} if name == "gcn_edge_weights" else {}
    out = pyg(x=x, edge_index=edge_index, **{k: x for k in extra}, **kw)
    (out * weights[:, : out.shape[1]]).sum().backward()
    grads = {prefix + n: p.grad for n, p in pyg.named_parameters()}
    return {"out": out.detach(), "x_grad": x.grad, "grads": grads}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    data = synthetic(150, avg_degree=6, num_classes=3, num_features=F_IN, seed=3)
    data.edge_weight = _edge_weight(*data.edge_index)  # [E]: the partition stores them (edge weights)
    csr = csr_from_edge_index(data.edge_index, data.num_nodes)
    edge_index = torch.stack([torch.from_numpy(csr.col), torch.from_numpy(csr.rows())])  # (src, dst)
    weights = torch.randn(data.num_nodes, 16, generator=torch.Generator().manual_seed(0))
    runs = {}
    for p in WORLD_SIZES:
        root = tmp_path_factory.mktemp(f"p{p}")
        partition(data, p, **QUICK_PARTITION).save(root, dataset="synthetic")
        runs[p] = run_distributed(_rank_job, p, str(root), weights)
    refs = {name: _reference(name, data, edge_index, weights) for name in WITH_PYG}
    return data, runs, refs


def _assert_same_run(ref: dict, got: dict) -> None:
    assert_close("out", ref["out"], got["out"])
    assert_close("x.grad", ref["x_grad"], got["x_grad"])
    assert set(ref["grads"]) == set(got["grads"]), (sorted(ref["grads"]), sorted(got["grads"]))
    for k, g in ref["grads"].items():
        assert_close(f"{k}.grad", g, got["grads"][k], atol=1e-5 * float(got["grads_abs"][k].max()))


@pytest.mark.parametrize("world_size", WORLD_SIZES, ids=lambda p: f"P{p}")
@pytest.mark.parametrize("name", WITH_PYG)
def test_equals_pyg(setup, name, world_size):
    data, runs, refs = setup
    _assert_same_run(refs[name], _gather(runs[world_size], name, data.num_nodes))


@pytest.mark.parametrize("world_size", WORLD_SIZES[1:], ids=lambda p: f"P{p}")
def test_gat_attention_dropout_is_partition_invariant(setup, world_size):
    data, runs, _ = setup
    one = _gather(runs[1], "gat_dropout", data.num_nodes)
    _assert_same_run(one, _gather(runs[world_size], "gat_dropout", data.num_nodes))
    without = _gather(runs[1], "gat_h2_concat", data.num_nodes)  # same weights, no dropout (equals PyG)
    assert (one["out"] - without["out"]).abs().max() > 1e-3, "attention dropout changed nothing"


@pytest.mark.parametrize("world_size", WORLD_SIZES[1:], ids=lambda p: f"P{p}")
def test_gat_model_with_dropout_is_partition_invariant(setup, world_size):
    data, runs, _ = setup
    _assert_same_run(_gather(runs[1], "gat_model", data.num_nodes),
                     _gather(runs[world_size], "gat_model", data.num_nodes))
