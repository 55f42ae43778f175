"""Layers (``gnndist.nn.conv``) and models (``gnndist.nn.models``, with the ``--model`` registry of specs).

Every layer takes ``(graph, x)`` and knows nothing about distribution.
"""

from gnndist.nn.conv import (
    GATConv,
    GCN2Conv,
    GCNConv,
    GENConv,
    GINConv,
    HeteroConv,
    LocalEdges,
    MessagePassing,
    NotDistributable,
    PyGAdapter,
    RGCNConv,
    SAGEConv,
    from_pyg,
    local_edges,
)
from gnndist.nn.models import GCNII, GNN, MODELS, GroupAddRev, ModelSpec, ResGCN, RevGNN, build_model, register_model
from gnndist.nn.node_embedding import NodeEmbedding
from gnndist.nn.norm import DistBatchNorm

__all__ = [
    "GCNII", "GNN", "MODELS", "DistBatchNorm", "GATConv", "GCN2Conv", "GCNConv", "GENConv", "GINConv", "GroupAddRev",
    "HeteroConv", "LocalEdges", "MessagePassing", "ModelSpec", "NodeEmbedding", "NotDistributable", "PyGAdapter",
    "RGCNConv", "ResGCN", "RevGNN", "SAGEConv", "build_model", "from_pyg", "local_edges", "register_model",
]
