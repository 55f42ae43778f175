"""Relational GCN layer (Schlichtkrull et al. 2018, https://arxiv.org/abs/1703.06103) on a typed graph."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnndist.kernels import spmm
from gnndist.nn.conv.message_passing import add_bias


class RGCNConv(nn.Module):
    r"""R-GCN layer: :math:`x'_i = W_0 x_i + b + \sum_r \mathrm{mean}_{j \in N_r(i)} W_r x_j`.

    One weight per relation, or (``num_bases > 0``) each a combination of shared bases,
    :math:`W_r = \sum_b a_{rb} V_b`. The relations are ``graph.relations`` (one local CSR each, rows
    the owned nodes); their sources come from one halo exchange of ``x`` for every relation. A
    relation without edges adds nothing (its weight's gradient is zero). Parameter names and shapes
    follow ``torch_geometric.nn.RGCNConv`` (``weight`` ``[R or B, in, out]``, ``comp`` ``[R, B]``,
    ``root`` ``[in, out]``, ``bias``), so a state dict loads into PyG's layer (``aggr="mean"``).

    Args:
        in_channels: input width.
        out_channels: output width.
        num_relations: number of relations R.
        num_bases: basis decomposition into this many bases (default 0: a full weight per relation).
        bias: add a bias (default ``True``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, out_channels: int, num_relations: int, num_bases: int = 0,
                 bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.num_relations = in_channels, out_channels, num_relations
        self.num_bases = num_bases
        self.weight = nn.Parameter(torch.empty(num_bases or num_relations, in_channels, out_channels))
        self.comp = nn.Parameter(torch.empty(num_relations, num_bases)) if num_bases else None
        self.root = nn.Parameter(torch.empty(in_channels, out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.tag = "rgcn"
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for p in (self.weight, self.comp, self.root):
            if p is not None:
                nn.init.xavier_uniform_(p.view(-1, p.shape[-1]) if p.dim() == 3 else p)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> Tensor:
        """``W_r`` of every relation. ``[R, in, out]``."""
        if self.comp is None:
            return self.weight
        return (self.comp @ self.weight.view(self.num_bases, -1)).view(self.num_relations, self.in_channels,
                                                                        self.out_channels)

    def forward(self, graph, x: Tensor) -> Tensor:
        if len(graph.relations) != self.num_relations:
            raise ValueError(f"RGCNConv has {self.num_relations} relations, the graph {len(graph.relations)}")
        h = graph.extend(x, tag=self.tag)  # [n_owned + n_halo, in]: one exchange serves every relation
        out = x @ self.root  # [n_owned, out]
        weights = self.relation_weights()  # [R, in, out]
        narrow = self.out_channels < self.in_channels  # transform first: the sum runs over the narrower rows
        for r, csr in enumerate(graph.relations):
            if csr.nnz == 0:
                continue
            if narrow:
                out = out + spmm(csr, h @ weights[r], reduce="mean", impl=graph.kernel.impl, tune=graph.kernel.tune)
            else:
                out = out + spmm(csr, h, reduce="mean", impl=graph.kernel.impl, tune=graph.kernel.tune) @ weights[r]
        return add_bias(out, self.bias)
