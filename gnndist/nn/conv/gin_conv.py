"""Graph isomorphism network layer (https://arxiv.org/abs/1810.00826)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class GINConv(nn.Module):
    r"""GIN layer: :math:`x'_i = h_\Theta\big((1 + \epsilon) x_i + \sum_{j \in N(i)} x_j\big)`.

    Args:
        mlp: the network :math:`h_\Theta` applied row-wise (``nn`` in PyG's ``GINConv``).
        eps: initial :math:`\epsilon` (default ``0``).
        train_eps: learn :math:`\epsilon` (default ``False``).

    Shapes:
        x ``[n_owned, in]`` -> ``[n_owned, out]``
    """

    def __init__(self, mlp: nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = mlp
        if train_eps:
            self.eps = nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))
        self.tag = "gin"

    def forward(self, graph, x: Tensor) -> Tensor:
        return self.nn((1 + self.eps) * x + graph.spmm(x, tag=self.tag))
