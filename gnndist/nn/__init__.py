"""Layers and models; every layer takes ``(graph, x)`` and knows nothing about distribution."""

from gnndist.nn.gcn_conv import GCNConv
from gnndist.nn.gin_conv import GINConv
from gnndist.nn.models import GNN, MODELS, build_model, register_model
from gnndist.nn.norm import DistBatchNorm
from gnndist.nn.sage_conv import SAGEConv

__all__ = ["GCNConv", "GINConv", "GNN", "MODELS", "DistBatchNorm", "SAGEConv", "build_model", "register_model"]
