"""The torch_geometric twins of gnndist's models that ``torch_geometric.nn.models`` has no class for.

``gnndist export --format pyg`` names, for ``--model gat``, ``gcn2``, ``gine`` and ``rgcn``, one of the classes
below (``{"module": "gnndist.pyg_twins", "model": "GAT", ...}``). They are built from
``torch_geometric.nn`` layers and torch only, and import nothing of gnndist: copy this file next
to the exported model to run it where gnndist is not installed. In eval mode each gives the
logits of gnndist's model with the same weights (dropout is the only difference in training).

    import importlib, torch
    f = torch.load("pyg.pt")
    model = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    logits = model.eval()(x, edge_index)        # GINE: model(x, edge_index, edge_attr)
    # RGCN (a typed graph's union): model(x, edge_index, edge_type, node_type)
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def _norm(norm: str, channels: int) -> nn.Module:
    """gnndist's ``--norm`` on one device: ``batch`` (running statistics in eval mode), ``layer``, ``none``."""
    return {"none": nn.Identity, "batch": nn.BatchNorm1d, "layer": nn.LayerNorm}[norm](channels)


class GAT(nn.Module):
    """gnndist's ``--model gat``: ``num_layers - 1`` GATConv of ``heads`` heads (concatenated) + ELU, then one head.

    PyG's ``GAT`` basic model differs: its output layer averages ``heads`` heads, gnndist's has one.

    Shapes:
        x ``[N, in_channels]``, edge_index ``[2, E]`` -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int, heads: int = 8,
                 norm: str = "none"):
        from torch_geometric.nn import GATConv

        super().__init__()
        per_head = max(1, hidden_channels // heads)
        widths = [in_channels] + [per_head * heads] * (num_layers - 1)
        self.convs = nn.ModuleList(GATConv(w, per_head, heads) for w in widths[:-1])
        self.convs.append(GATConv(widths[-1], out_channels, heads=1, concat=False))
        self.norms = nn.ModuleList(_norm(norm, per_head * heads) for _ in range(num_layers - 1))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.elu(self.norms[i](x))
        return x


class GCNII(nn.Module):
    """gnndist's ``--model gcn2``: linear + ReLU, ``num_layers`` x (GCN2Conv + ReLU) with the initial residual, linear.

    Shapes:
        x ``[N, in_channels]``, edge_index ``[2, E]`` -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int,
                 alpha: float = 0.1, theta: float = 0.5):
        from torch_geometric.nn import GCN2Conv

        super().__init__()
        self.lin_in = nn.Linear(in_channels, hidden_channels)
        self.convs = nn.ModuleList(GCN2Conv(hidden_channels, alpha, theta, layer=i + 1) for i in range(num_layers))
        self.lin_out = nn.Linear(hidden_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = x_0 = F.relu(self.lin_in(x))
        for conv in self.convs:
            x = F.relu(conv(x, x_0, edge_index))
        return self.lin_out(x)


class GINE(nn.Module):
    """gnndist's ``--model gine``: linear, ``num_layers`` x (GINEConv with an edge encoder, norm, ReLU), linear.

    Shapes:
        x ``[N, in_channels]``, edge_index ``[2, E]``, edge_attr ``[E, edge_dim]`` -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int, edge_dim: int,
                 norm: str = "none"):
        from torch_geometric.nn import GINEConv

        super().__init__()
        h = hidden_channels
        self.inp = nn.Linear(in_channels, h)
        self.convs = nn.ModuleList(GINEConv(nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h)),
                                            edge_dim=edge_dim) for _ in range(num_layers))
        self.norms = nn.ModuleList(_norm(norm, h) for _ in range(num_layers))
        self.out = nn.Linear(h, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        x = self.inp(x)
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x, edge_index, edge_attr.to(x.dtype))))
        return self.out(x)


class RGCN(nn.Module):
    """gnndist's ``--model rgcn``: the featureless types' rows, then ``num_layers`` RGCNConv (``aggr="mean"``, root
    weight, ``num_bases``) with norm + ReLU between them.

    It runs on a typed graph's union graph, as PyG's ``RGCNConv`` does: every node type's rows one after the other
    in ``node_types`` order, each type's in its own id order (``HeteroData.to_homogeneous()``'s layout), and one
    ``edge_type`` per edge indexing ``relations``. A featureless type (``featured[t]`` false) takes its rows from
    ``embeddings[t]`` (an ``nn.Embedding`` of one row per node: gnndist's ``--embedding learn`` table), or zeros
    (``--embedding zero``); ``x``'s rows of those types are not read.

    Shapes:
        x ``[N, in_channels]`` (N: every type's nodes), edge_index ``[2, E]`` (source, destination),
        edge_type ``[E]``, node_type ``[N]`` (index into ``node_types``) -> ``[N, out_channels]``
    """

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int,
                 node_types: list[str], relations: list[tuple[str, str, str]], featured: list[bool],
                 embedding_rows: dict[str, int], num_bases: int = 0, norm: str = "none"):
        from torch_geometric.nn import RGCNConv

        super().__init__()
        self.node_types, self.featured = list(node_types), list(featured)
        self.embeddings = nn.ModuleDict({t: nn.Embedding(n, in_channels) for t, n in embedding_rows.items()})
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(RGCNConv(a, b, len(relations), num_bases=num_bases or None, aggr="mean")
                                   for a, b in zip(widths[:-1], widths[1:]))
        self.norms = nn.ModuleList(_norm(norm, hidden_channels) for _ in range(num_layers - 1))

    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, node_type: Tensor) -> Tensor:
        x = x.clone()  # [N, in_channels]
        for t, name in enumerate(self.node_types):
            if not self.featured[t]:
                rows = node_type == t
                x[rows] = self.embeddings[name].weight.to(x.dtype) if name in self.embeddings else 0.0
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index, edge_type)  # [N, width of layer i]
            if i < len(self.convs) - 1:
                x = F.relu(self.norms[i](x))
        return x
