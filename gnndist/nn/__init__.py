"""Layers and models; every layer takes ``(graph, x)`` and knows nothing about distribution."""

from gnndist.nn.deep import GCNII, ResGCN
from gnndist.nn.gat_conv import GATConv
from gnndist.nn.gcn2_conv import GCN2Conv
from gnndist.nn.gcn_conv import GCNConv
from gnndist.nn.gen_conv import GENConv
from gnndist.nn.gin_conv import GINConv
from gnndist.nn.hetero_conv import HeteroConv
from gnndist.nn.message_passing import LocalEdges, MessagePassing, local_edges
from gnndist.nn.models import GNN, MODELS, build_model, register_model
from gnndist.nn.node_embedding import NodeEmbedding
from gnndist.nn.norm import DistBatchNorm
from gnndist.nn.pyg_adapter import NotDistributable, PyGAdapter, from_pyg
from gnndist.nn.rev_gnn import GroupAddRev, RevGNN
from gnndist.nn.sage_conv import SAGEConv

__all__ = [
    "GCNII", "GNN", "MODELS", "DistBatchNorm", "GATConv", "GCN2Conv", "GCNConv", "GENConv", "GINConv", "GroupAddRev",
    "HeteroConv", "LocalEdges", "MessagePassing", "NodeEmbedding", "NotDistributable", "PyGAdapter", "ResGCN", "RevGNN", "SAGEConv", "build_model",
    "from_pyg", "local_edges", "register_model",
]
