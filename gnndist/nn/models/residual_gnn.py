"""Classic GNN layers in the residual architecture of Platonov et al. (ICLR 2023, https://arxiv.org/abs/2302.11640)."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.errors import UserError
from gnndist.nn.conv.gat_conv import GATConv
from gnndist.nn.norm import apply_norm, make_norm
from gnndist.nn.recompute import checkpointed


class ResidualGNN(nn.Module):
    r"""Input linear, ``layers`` pre-norm residual blocks around a graph layer, norm and output linear.

    :math:`X_0 = \mathrm{GELU}(\mathrm{drop}(X W_{in}))`; block ``l``:
    :math:`X_l = X_{l-1} + \mathrm{drop}(\mathrm{GELU}(\mathrm{drop}(\mathrm{conv}_l(\mathrm{norm}_l(X_{l-1})))) W_l)`;
    out :math:`\mathrm{norm}(X_L) W_{out}`. ``conv_l`` is the first linear of the paper's feed-forward
    module with the graph's aggregation: for GCN, :math:`\hat A (H W) + b = (\hat A H) W + b`; for
    SAGE, :math:`W [H \Vert \mathrm{mean}_N H] + b` (``SAGEConv``'s ``lin_r`` and ``lin_l``); for GAT,
    attention with 8 heads (no attention dropout), then that linear (:class:`ThenLinear`). Dropout masks come
    from ``graph.dropout`` (keys 0 .. 2L), so P ranks train exactly like one; layer norm is per node.
    ``--arch residual`` with ``--model gcn|sage|gat|gin``; the heterophily recipe
    (:func:`gnndist.presets.heterophily`) sets the paper's widths and training.

    Args:
        conv: factory ``(hidden, hidden) -> layer`` taking ``(graph, x)``.
        in_channels: input width.
        hidden: hidden width.
        out_channels: output width.
        layers: residual blocks (>= 1).
        dropout: dropout probability after the input linear and twice in every block.
        norm: ``"layer"`` (the paper's), ``"batch"`` (global statistics) or ``"none"``.

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, conv: Callable[[int, int], nn.Module], in_channels: int, hidden: int, out_channels: int,
                 layers: int = 5, dropout: float = 0.2, norm: str = "layer"):
        super().__init__()
        self.lin_in = nn.Linear(in_channels, hidden)
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers))
        self.convs = nn.ModuleList(conv(hidden, hidden) for _ in range(layers))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        self.lins = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.norm_out = make_norm(norm, hidden)
        self.lin_out = nn.Linear(hidden, out_channels)
        self.dropout = dropout
        self.recompute = False

    def _block(self, i: int):
        def block(graph, x: Tensor) -> Tensor:
            h = self.convs[i](graph, apply_norm(self.norms[i], graph, x))  # [n_owned, hidden]
            h = F.gelu(graph.dropout(h, self.dropout, key=2 * i + 1, training=self.training))
            return graph.dropout(self.lins[i](h), self.dropout, key=2 * i + 2, training=self.training)

        return block

    def forward(self, graph, x: Tensor) -> Tensor:
        x = self.lin_in(graph.input_rows(x))  # [n_owned, hidden]: mostly-zero features as SparseRows
        x = F.gelu(graph.dropout(x, self.dropout, key=0, training=self.training))  # [n_owned, hidden]
        for i in range(len(self.convs)):
            x = x + checkpointed(self._block(i), graph, x, enabled=self.recompute and self.training)
        return self.lin_out(apply_norm(self.norm_out, graph, x))  # [n_owned, out_channels]


class ThenLinear(nn.Module):
    """A graph layer, then a linear map: ``lin(conv(graph, x))`` (GAT's block: attention, then the first linear).

    Args:
        conv: a layer taking ``(graph, x)``, of output width ``in_features``.
        in_features, out_features: widths of the linear map.

    Shapes:
        x ``[n_owned, F]`` -> ``[n_owned, out_features]``
    """

    def __init__(self, conv: nn.Module, in_features: int, out_features: int):
        super().__init__()
        self.conv, self.lin = conv, nn.Linear(in_features, out_features)

    @property
    def tag(self) -> str:
        return self.conv.tag

    @tag.setter
    def tag(self, value: str) -> None:
        self.conv.tag = value

    def forward(self, graph, x: Tensor) -> Tensor:
        return self.lin(self.conv(graph, x))  # [n_owned, out_features]


def gat_heads(i: int, o: int, heads: int = 8) -> nn.Module:
    """The residual blocks' GAT layer: ``heads`` heads of ``o // heads``, concatenated (no attention dropout), then
    a linear map mixing the heads (the first linear of the paper's feed-forward module)."""
    if o % heads:
        raise UserError(f"--arch residual --model gat: --hidden {o} must be a multiple of its {heads} heads")
    return ThenLinear(GATConv(i, o // heads, heads), o, o)
