"""GCNII layer of Chen et al., "Simple and Deep Graph Convolutional Networks" (https://arxiv.org/abs/2007.02133)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class GCN2Conv(nn.Module):
    r"""GCNII layer: :math:`X' = \big((1 - \alpha) \hat P X + \alpha X_0\big)\big((1 - \beta_l) I + \beta_l W\big)`.

    :math:`\hat P = \hat D^{-1/2} (A + I) \hat D^{-1/2}` (global degrees) is one
    ``graph.spmm`` with the run's strategy; :math:`X_0` is the initial representation
    (initial residual) and :math:`\beta_l = \log(\theta / l + 1)` the identity mapping of
    layer ``l``. Parameter names and initialisation follow ``torch_geometric.nn.GCN2Conv``
    with ``shared_weights=True`` (``weight1`` ``[channels, channels]``).

    Args:
        channels: width of the input, of ``x_0`` and of the output.
        alpha: weight of the initial residual (default ``0.1``).
        theta: :math:`\theta` (the paper's :math:`\lambda`) of the identity mapping (default ``0.5``).
        layer: the layer's 1-based depth :math:`l` (default ``1``).

    Shapes:
        x ``[n_owned, channels]``, x_0 ``[n_owned, channels]`` -> ``[n_owned, channels]``
    """

    def __init__(self, channels: int, alpha: float = 0.1, theta: float = 0.5, layer: int = 1):
        super().__init__()
        self.channels, self.alpha, self.theta, self.layer = channels, alpha, theta, layer
        self.beta = math.log(theta / layer + 1.0)
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        self.tag = "gcn2"
        nn.init.xavier_uniform_(self.weight1)

    def forward(self, graph, x: Tensor, x_0: Tensor) -> Tensor:
        h = (1.0 - self.alpha) * graph.spmm(x, weight="gcn", tag=self.tag) + self.alpha * x_0  # [n_owned, C]
        return torch.addmm(h, h, self.weight1, beta=1.0 - self.beta, alpha=self.beta)

    def extra_repr(self) -> str:
        return f"{self.channels}, alpha={self.alpha}, beta={self.beta:.4f}"
