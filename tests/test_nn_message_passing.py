"""The MessagePassing API on one rank: which path runs, argument resolution, aggregations, errors.

Multi-rank exactness of layers built on it is in ``test_nn_layers.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition
from torch import Tensor

import gnndist.nn as gnn
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.testing import assert_close


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """A one-rank graph, its dataset and the symmetrised global edge_index (src, dst)."""
    data = synthetic(60, avg_degree=5, num_classes=3, num_features=6, seed=1)
    root = tmp_path_factory.mktemp("p1")
    partition(data, 1).save(root, dataset="synthetic")
    graph = DistGraph.load(root, ProcessGrid())
    csr = csr_from_edge_index(data.edge_index, data.num_nodes)
    edge_index = torch.stack([torch.from_numpy(csr.col), torch.from_numpy(csr.rows())])
    order = graph.orig_id.long()  # local id -> dataset id
    return graph, data.x[order], edge_index, order


class Spy:
    """Counts calls of ``graph.spmm`` (the fused path): the SpMMs the step context recorded."""

    def __init__(self, graph):
        self.graph, self.calls = graph, 0

    def total(self) -> int:
        return sum(c.count for c in self.graph.context.calls.values())

    def __enter__(self):
        self.before = self.total()
        return self

    def __exit__(self, *exc):
        self.calls = self.total() - self.before


class Plain(gnn.MessagePassing):
    def forward(self, graph, x):
        return self.propagate(graph, x)


class NodeWise(gnn.MessagePassing):
    """A message of the source alone (not linear): still aggregated by SpMM, once per node."""

    def message(self, x_j: Tensor) -> Tensor:
        return torch.tanh(x_j)

    def forward(self, graph, x):
        return self.propagate(graph, x)


class Both(gnn.MessagePassing):
    aggr = "mean"

    def message(self, x_i: Tensor, x_j: Tensor, scale: float) -> Tensor:
        return scale * (x_j - x_i)

    def update(self, out: Tensor, x: Tensor) -> Tensor:
        return out + x

    def forward(self, graph, x):
        return self.propagate(graph, x, scale=2.0)


def _dense(graph):
    """Adjacency of the one-rank graph in local ids as a dense matrix ``[n, n]`` (row = destination)."""
    n = graph.n_owned
    adj = torch.zeros(n, n)
    adj[graph.csr.row.long(), graph.csr.col.long()] = 1.0
    return adj


def test_default_message_takes_the_fused_path(one):
    graph, x, _, _ = one
    with Spy(graph) as spy:
        out = Plain()(graph, x)
    assert spy.calls == 1
    assert_close("sum", _dense(graph) @ x, out)


def test_node_wise_message_is_applied_once_per_node_then_spmm(one):
    graph, x, _, _ = one
    with Spy(graph) as spy:
        out = NodeWise()(graph, x)
    assert spy.calls == 1
    assert_close("sum tanh", _dense(graph) @ torch.tanh(x), out)


def test_edge_message_with_both_endpoints_and_update(one):
    graph, x, _, _ = one
    adj = _dense(graph)
    with Spy(graph) as spy:
        out = Both()(graph, x)
    assert spy.calls == 0
    deg = adj.sum(1, keepdim=True).clamp(min=1)
    assert_close("mean 2(x_j - x_i) + x", 2 * (adj @ x - adj.sum(1, keepdim=True) * x) / deg + x, out)


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "softmax"])
def test_aggregations_with_self_loops_equal_pyg(one, aggr):
    graph, x, edge_index, order = one

    class Loops(gnn.MessagePassing):
        self_loops = True

        def message(self, x_i, x_j):
            return x_j * x_i.sigmoid()

        def forward(self, graph, x):
            return self.propagate(graph, x, aggr=aggr)

    class Ref(pyg_nn.MessagePassing):
        def __init__(self):
            super().__init__(aggr=aggr if aggr != "softmax" else pyg_nn.aggr.SoftmaxAggregation())

        def forward(self, x, edge_index):
            loops = torch.arange(x.shape[0])
            return self.propagate(torch.cat([edge_index, torch.stack([loops, loops])], 1), x=x)

        def message(self, x_i, x_j):
            return x_j * x_i.sigmoid()

    x_data = torch.empty_like(x)
    x_data[order] = x
    ref = Ref()(x_data, edge_index)[order]
    assert_close(aggr, ref, Loops()(graph, x))


def test_edge_softmax_and_dropout_of_local_edges(one):
    graph, x, _, _ = one
    edges = gnn.local_edges(graph, self_loops=True)
    assert edges.nnz == graph.csr.nnz + graph.n_owned
    alpha = edges.softmax(edges.sddmm(x[:, :2], x[:, 2:4]))  # [nnz, 2]
    sums = torch.zeros(graph.n_owned, 2).index_add_(0, edges.row, alpha)
    assert_close("rows sum to one", torch.ones_like(sums), sums)
    with graph.context.step(epoch=1):
        dropped = edges.dropout(graph, alpha, 0.5, key=7)
        kept = (dropped != 0).float().mean().item()
        assert 0.35 < kept < 0.65
        assert torch.equal(dropped, edges.dropout(graph, alpha, 0.5, key=7)), "masks are deterministic"
        assert torch.equal(alpha, edges.dropout(graph, alpha, 0.5, key=7, training=False))


def test_missing_message_argument_names_it(one):
    graph, x, _, _ = one

    class Needs(gnn.MessagePassing):
        def message(self, x_j, gate_j):
            return x_j * gate_j

        def forward(self, graph, x):
            return self.propagate(graph, x)

    with pytest.raises(TypeError, match="'gate_j'.*gate=..."):
        Needs()(graph, x)


def test_edge_weight_of_the_wrong_edges_is_refused(one):
    graph, x, _, _ = one
    with pytest.raises(ValueError, match="self.edges"):
        Plain().propagate(graph, x, edge_weight=torch.ones(graph.csr.nnz + 1))
    with pytest.raises(ValueError, match="aggr must be one of"):
        Plain().propagate(graph, x, aggr="median")
