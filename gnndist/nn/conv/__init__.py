"""Layers: each takes ``(graph, x)`` and knows nothing about distribution (one layer per file, as PyG's ``nn/conv``)."""

from gnndist.nn.conv.gat_conv import GATConv
from gnndist.nn.conv.gcn2_conv import GCN2Conv
from gnndist.nn.conv.gcn_conv import GCNConv
from gnndist.nn.conv.gen_conv import GENConv
from gnndist.nn.conv.gin_conv import GINConv
from gnndist.nn.conv.hetero_conv import HeteroConv
from gnndist.nn.conv.message_passing import LocalEdges, MessagePassing, local_edges
from gnndist.nn.conv.pyg_adapter import NotDistributable, PyGAdapter, from_pyg
from gnndist.nn.conv.rgcn_conv import RGCNConv
from gnndist.nn.conv.sage_conv import SAGEConv

__all__ = ["GATConv", "GCN2Conv", "GCNConv", "GENConv", "GINConv", "HeteroConv", "LocalEdges", "MessagePassing",
           "NotDistributable", "PyGAdapter", "RGCNConv", "SAGEConv", "from_pyg", "local_edges"]
