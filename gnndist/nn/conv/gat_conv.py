"""Graph attention layer of Veličković et al. (https://arxiv.org/abs/1710.10903)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.nn.conv.message_passing import MessagePassing, add_bias


class GATConv(MessagePassing):
    r"""GAT layer: :math:`x'_i = \big\Vert_h \sum_{j \in N(i) \cup \{i\}} \alpha^h_{ij} W^h x_j + b`.

    :math:`\alpha^h_{ij} = \mathrm{softmax}_j\big(\mathrm{LeakyReLU}(a^h_{dst} \cdot W^h x_i
    + a^h_{src} \cdot W^h x_j)\big)`.
    The transformed rows ``W x`` are exchanged once; attention scores of halo sources are
    computed from them, so the softmax over an owned row's edges is exact. Attention
    dropout draws its mask from (seed, epoch, layer, dataset ids of both endpoints): the
    same on every number of ranks. Parameter names, shapes and initialisation follow
    ``torch_geometric.nn.GATConv`` (``lin.weight`` ``[H*C, in]``, ``att_src``/``att_dst``
    ``[1, H, C]``, ``bias``), so ``load_state_dict`` of a PyG layer works.

    Args:
        in_channels: input width.
        out_channels: width per head ``C``.
        heads: number of heads ``H`` (default ``1``).
        concat: concatenate the heads (``[n, H*C]``) or average them (``[n, C]``) (default ``True``).
        negative_slope: LeakyReLU slope (default ``0.2``).
        dropout: dropout probability of the attention coefficients (default ``0``).
        add_self_loops: attend to the node itself (default ``True``, as PyG).
        bias: learnable bias (default ``True``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, H*C]`` (concat) or ``[n_owned, C]``
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout = negative_slope, dropout
        self.self_loops = add_self_loops
        self.tag = "gat"
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        for att in (self.att_src, self.att_dst):  # PyG's glorot on [1, H, C]
            bound = (6.0 / (att.shape[-2] + att.shape[-1])) ** 0.5
            nn.init.uniform_(att, -bound, bound)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, graph, x: Tensor) -> Tensor:
        h = self.lin(x).view(x.shape[0], self.heads, self.out_channels)  # [n_owned, H, C]
        h_ext = graph.extend(h, self.tag)  # [n_owned + n_halo, H, C]: the one exchange
        edges = self.edges(graph)
        a_src = (h_ext * self.att_src).sum(-1)  # [n_owned + n_halo, H]
        a_dst = (h * self.att_dst).sum(-1)  # [n_owned, H]
        score = F.leaky_relu(edges.sddmm(a_dst, a_src), self.negative_slope)  # [nnz, H]
        alpha = edges.softmax(score)  # [nnz, H]
        alpha = edges.dropout(graph, alpha, self.dropout, self.dropout_key("attention"), self.training)
        out = self.propagate(graph, h_ext, edge_weight=alpha)  # [n_owned, H, C]
        out = out.flatten(1) if self.concat else out.mean(dim=1)
        return add_bias(out, self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}"
