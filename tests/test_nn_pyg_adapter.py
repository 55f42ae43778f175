"""The PyG adapter refuses layers it cannot run exactly, with a message that names what is missing.

Exactness of the supported layers on 1, 2 and 4 ranks is in ``test_nn_layers.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, partition

import gnndist.nn as gnn
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.grid import ProcessGrid
from gnndist.testing import assert_close


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    data = synthetic(60, avg_degree=5, num_classes=3, num_features=6, seed=2)
    root = tmp_path_factory.mktemp("p1")
    partition(data, 1).save(root, dataset="synthetic")
    csr = csr_from_edge_index(data.edge_index, data.num_nodes)
    edge_index = torch.stack([torch.from_numpy(csr.col), torch.from_numpy(csr.rows())])
    return DistGraph.load(root, ProcessGrid()), data, edge_index


@pytest.mark.parametrize("conv, missing", [
    (pyg_nn.APPNP(K=10, alpha=0.1), "K=10 hops.*1-hop halo"),
    (pyg_nn.SGConv(6, 3, K=2), "K=2 hops"),
    (pyg_nn.TAGConv(6, 3), "K=3 hops"),
    (pyg_nn.LGConv(), "degrees of halo nodes are missing"),
], ids=["APPNP", "SGConv", "TAGConv", "LGConv"])
def test_layers_needing_more_than_the_halo_fail_at_construction(conv, missing):
    with pytest.raises(gnn.NotDistributable, match=missing):
        gnn.PyGAdapter(conv)


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
