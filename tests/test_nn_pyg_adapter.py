"""The PyG adapter refuses layers it cannot run exactly, with a message that names what is missing.

Exactness of the supported layers on 1, 2 and 4 ranks is in ``test_nn_layers.py``; every
class of ``torch_geometric.nn.conv`` at 2 ranks in ``test_nn_pyg_sweep.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition

import gnndist.nn as gnn
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION, assert_close


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    data = synthetic(60, avg_degree=5, num_classes=3, num_features=6, seed=2)
    root = tmp_path_factory.mktemp("p1")
    partition(data, 1).save(root, dataset="synthetic")
    csr = csr_from_edge_index(data.edge_index, data.num_nodes)
    edge_index = torch.stack([torch.from_numpy(csr.col), torch.from_numpy(csr.rows())])
    return DistGraph.load(root, ProcessGrid()), data, edge_index


class _RewiredGCN(pyg_nn.MessagePassing):
    """Normalises over half of its edges: degrees no partition knows."""

    def forward(self, x, edge_index):
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        edge_index, w = gcn_norm(edge_index[:, ::2], None, x.shape[0])
        return self.propagate(edge_index, x=x, w=w)

    def message(self, x_j, w):
        return w.view(-1, 1) * x_j


class _ReversedWeighted(pyg_nn.MessagePassing):
    """Flips the edges and passes a per-edge value along: a reversed edge's value lives on the other rank."""

    def forward(self, x, edge_index):
        w = torch.arange(edge_index.shape[1], dtype=x.dtype)
        return self.propagate(edge_index.flip(0), x=x, w=w)

    def message(self, x_j, w):
        return w.view(-1, 1) * x_j


@pytest.mark.parametrize("build, missing", [
    (lambda: pyg_nn.WLConv(), "WLConv gives every new colour.*hash table.*depend on the partition.*WLConvContinuous"),
    (lambda: pyg_nn.GPSConv(6, pyg_nn.GINConv(torch.nn.Linear(6, 6)), heads=2, norm=None),
     r"GPSConv\.attn \(MultiheadAttention\) attends over all nodes"),
    (lambda: pyg_nn.PANConv(6, 3, filter_size=2), "powers of the adjacency.*edges among halo nodes.*MixHopConv"),
], ids=["WLConv", "GPSConv", "PANConv"])
def test_layers_needing_what_no_rank_holds_fail_at_construction(build, missing):
    with pytest.raises(gnn.NotDistributable, match=missing):
        gnn.PyGAdapter(build())


@pytest.mark.parametrize("build", [
    lambda: pyg_nn.APPNP(K=10, alpha=0.1), lambda: pyg_nn.SGConv(6, 3, K=2), lambda: pyg_nn.TAGConv(6, 3),
    lambda: pyg_nn.LGConv(), lambda: pyg_nn.ChebConv(6, 3, K=3), lambda: pyg_nn.GatedGraphConv(6, 1),
], ids=["APPNP", "SGConv", "TAGConv", "LGConv", "ChebConv", "GatedGraphConv"])
def test_multi_hop_and_degree_normalised_layers_equal_one_process(one, build):
    """On one rank (the halo is empty); 2 ranks in test_nn_pyg_sweep.py."""
    graph, data, edge_index = one
    conv = build()
    order = graph.orig_id.long()
    assert_close("out", conv(data.x, edge_index)[order], gnn.PyGAdapter(conv)(graph, graph.x))


def test_normalising_over_other_edges_is_refused(one):
    graph, _, _ = one
    with pytest.raises(gnn.NotDistributable, match="_RewiredGCN calls gcn_norm on edges that are not the graph's"):
        gnn.PyGAdapter(_RewiredGCN())(graph, graph.x)


def test_reversed_edges_with_per_edge_values_are_refused(one):
    graph, _, _ = one
    with pytest.raises(gnn.NotDistributable, match=r"reverses the edges and passes per-edge \['w'\]"):
        gnn.PyGAdapter(_ReversedWeighted())(graph, graph.x)


def test_edge_inputs_must_have_one_row_per_local_edge(one):
    graph, _, _ = one
    layer = gnn.PyGAdapter(pyg_nn.GINEConv(torch.nn.Linear(6, 3), edge_dim=2))
    with pytest.raises(gnn.NotDistributable, match=r"edge_attr must hold one row per local edge"):
        layer(graph, graph.x, edge_attr=torch.zeros(graph.n_owned, 2))


def test_supergat_is_refused_in_training_and_exact_in_eval(one):
    graph, data, edge_index = one
    conv = pyg_nn.SuperGATConv(6, 3, heads=2)
    layer = gnn.PyGAdapter(conv)
    with pytest.raises(gnn.NotDistributable, match="SuperGATConv in training samples.*exact in eval mode"):
        layer(graph, graph.x)
    layer.eval()
    assert_close("eval", conv(data.x, edge_index)[graph.orig_id.long()], layer(graph, graph.x))


def test_batch_norm_inside_a_layer_fails_in_training_and_runs_in_eval(one):
    graph, data, edge_index = one
    conv = pyg_nn.GENConv(6, 4)  # PyG's default MLP has BatchNorm1d at mlp.1
    layer = gnn.PyGAdapter(conv)
    with pytest.raises(gnn.NotDistributable, match=r"GENConv\.mlp\.1 \(BatchNorm1d\).*statistics over all nodes"):
        layer(graph, graph.x)
    layer.eval()  # running statistics are per node: exact
    order = graph.orig_id.long()
    assert_close("eval", conv(data.x, edge_index)[order], layer(graph, graph.x))


def test_graph_wide_norm_and_torch_dropout_fail_with_their_names(one):
    graph, _, _ = one
    with pytest.raises(gnn.NotDistributable, match=r"GINConv\.nn\.1 \(GraphNorm\)"):
        gnn.PyGAdapter(pyg_nn.GINConv(torch.nn.Sequential(torch.nn.Linear(6, 4), pyg_nn.GraphNorm(4))))(graph, graph.x)
    attention = gnn.PyGAdapter(pyg_nn.GATConv(6, 4, heads=2, dropout=0.5))
    with pytest.raises(gnn.NotDistributable, match="GATConv draws dropout masks.*gnndist.nn.GATConv"):
        attention(graph, graph.x)
    attention.eval()
    assert attention(graph, graph.x).shape == (graph.n_owned, 8)


def test_not_distributable_is_a_user_error():
    assert issubclass(gnn.NotDistributable, UserError)


def test_partition_stores_edge_features_per_local_edge(tmp_path):
    """Each local edge ``src -> dst`` carries the dataset's value of that edge, or of ``dst -> src`` if only that
    is listed."""
    data = synthetic(40, avg_degree=4, num_classes=2, num_features=3, seed=4)
    one_way = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]  # each undirected edge once
    data.edge_index = one_way
    data.edge_attr = torch.randn(one_way.shape[1], 2, generator=torch.Generator().manual_seed(0))
    value = {(int(s), int(d)): a for (s, d), a in zip(one_way.t(), data.edge_attr)}
    partition(data, 2, progress=False, **QUICK_PARTITION).save(tmp_path, dataset="synthetic", progress=False)
    from gnndist.partition import read_part

    seen = 0
    for rank in range(2):
        part = read_part(tmp_path, rank)
        rows = torch.repeat_interleave(torch.arange(len(part["rowptr"]) - 1), torch.from_numpy(part["rowptr"]).diff())
        src, dst = part["orig_id"][part["col"]], part["orig_id"][rows.numpy()]
        assert part["edge_attr"].shape == (len(part["col"]), 2)
        for s, d, a in zip(src, dst, part["edge_attr"]):
            expect = value.get((int(s), int(d)), value.get((int(d), int(s))))
            assert torch.equal(torch.from_numpy(a), expect), (s, d)
        seen += len(src)
    assert seen == 2 * one_way.shape[1]  # both directions of every edge, once each
