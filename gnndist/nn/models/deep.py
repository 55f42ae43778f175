"""Deep residual models: GCNII (initial residual + identity mapping) and DeeperGCN's ResGCN+ (res+ blocks).

Both are built from a depth; every block may be recomputed in backward
(``recompute=True``, ``--recompute``) instead of keeping its activations.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.errors import UserError
from gnndist.nn.conv.gcn2_conv import GCN2Conv
from gnndist.nn.conv.gen_conv import GENConv
from gnndist.nn.norm import apply_norm, make_norm
from gnndist.nn.recompute import checkpointed


class GCNII(nn.Module):
    r"""GCNII of Chen et al. (https://arxiv.org/abs/2007.02133): linear, ``layers`` x :class:`GCN2Conv` + ReLU, linear.

    :math:`X_0 = \mathrm{ReLU}(\mathrm{drop}(X) W_{in})`; block ``l``:
    :math:`X \leftarrow \mathrm{ReLU}(\mathrm{GCN2Conv}_l(\mathrm{drop}(X), X_0))`; out
    :math:`\mathrm{drop}(X) W_{out}`. The paper's Cora recipe (the ``gcn2`` preset): 64
    layers, hidden 64, dropout 0.6, ``alpha=0.1``, ``theta=0.5``, Adam lr 0.01, weight decay
    0.01 on the convolutions and 5e-4 (``--weight-decay``) on the linear layers.

    Args:
        in_channels: input width.
        hidden: hidden width.
        out_channels: output width.
        layers: number of GCNII convolutions (>= 1).
        dropout: dropout probability before every layer (partition-invariant masks).
        norm: must be ``"none"`` (GCNII has no normalisation layers).
        alpha: of every :class:`GCN2Conv` (default ``0.1``).
        theta: of every :class:`GCN2Conv` (default ``0.5``).
        conv_weight_decay: weight decay of the convolutions' weights (default ``0.01``).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 64, dropout: float = 0.6,
                 norm: str = "none", alpha: float = 0.1, theta: float = 0.5, conv_weight_decay: float = 0.01):
        super().__init__()
        if norm != "none":
            raise UserError(f"--model gcn2 has no normalisation layers: drop --norm {norm}")
        self.lin_in = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(GCN2Conv(hidden, alpha, theta, layer=i + 1) for i in range(layers))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        self.lin_out = nn.Linear(hidden, out_channels)
        self.dropout, self.conv_weight_decay = dropout, conv_weight_decay
        self.recompute = False

    def param_groups(self, weight_decay: float) -> list[dict]:
        """Adam parameter groups: the paper's weight decay on the convolutions, ``weight_decay`` on the rest."""
        convs = list(self.convs.parameters())
        rest = [p for n, p in self.named_parameters() if not n.startswith("convs.")]
        return [{"params": convs, "weight_decay": self.conv_weight_decay},
                {"params": rest, "weight_decay": weight_decay}]

    def _block(self, i: int):
        def block(graph, x: Tensor, x_0: Tensor) -> Tensor:
            x = graph.dropout(x, self.dropout, key=i + 1, training=self.training)
            return F.relu(self.convs[i](graph, x, x_0))  # [n_owned, hidden]

        return block

    def forward(self, graph, x: Tensor) -> Tensor:
        x = graph.dropout(x, self.dropout, key=0, training=self.training, sparse=True)
        x = x_0 = F.relu(self.lin_in(x))  # [n_owned, hidden]
        for i in range(len(self.convs)):
            x = checkpointed(self._block(i), graph, x, x_0, enabled=self.recompute and self.training)
        x = graph.dropout(x, self.dropout, key=len(self.convs) + 1, training=self.training)
        return self.lin_out(x)  # [n_owned, out_channels]


class ResGCN(nn.Module):
    r"""DeeperGCN's ResGCN+ (Li et al., https://arxiv.org/abs/2006.07739): ``layers`` :class:`GENConv` in res+ blocks.

    :math:`H_0 = \mathrm{GENConv}_0(\mathrm{drop}(X) W_{in})`; block ``l >= 1`` is pre-activation,
    :math:`H_l = H_{l-1} + \mathrm{GENConv}_l(\mathrm{drop}(\mathrm{ReLU}(\mathrm{norm}_l(H_{l-1}))))`;
    out :math:`\mathrm{drop}(\mathrm{ReLU}(\mathrm{norm}_0(H_{L-1}))) W_{out}`. Every GENConv
    aggregates with a softmax of learnable inverse temperature (``t`` starts at 1) and a
    2-layer MLP with the same norm. Softmax aggregation is per edge, so it runs on the 1d
    layout whatever ``--strategy`` says.

    Args:
        in_channels: input width.
        hidden: hidden width.
        out_channels: output width.
        layers: number of GENConv layers (>= 1).
        dropout: dropout probability of the input, inside every block and before the output layer.
        norm: ``"batch"`` (global statistics), ``"layer"`` or ``"none"``, in the blocks and MLPs.

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 7, dropout: float = 0.2,
                 norm: str = "layer"):
        super().__init__()
        self.lin_in = nn.Linear(in_channels, hidden)
        self.convs = nn.ModuleList(GENConv(hidden, hidden, t=1.0, learn_t=True, norm=norm) for _ in range(layers))
        for i, c in enumerate(self.convs):
            c.tag = f"layer{i}"
        self.norms = nn.ModuleList(make_norm(norm, hidden) for _ in range(layers))
        self.lin_out = nn.Linear(hidden, out_channels)
        self.dropout = dropout
        self.recompute = False

    def _block(self, i: int):
        def block(graph, h: Tensor) -> Tensor:
            h = F.relu(apply_norm(self.norms[i], graph, h))
            h = graph.dropout(h, self.dropout, key=i, training=self.training)
            return self.convs[i](graph, h)  # [n_owned, hidden]

        return block

    def forward(self, graph, x: Tensor) -> Tensor:
        on = self.recompute and self.training
        x = graph.dropout(x, self.dropout, key=len(self.convs) + 1, training=self.training, sparse=True)
        h = checkpointed(lambda g, v: self.convs[0](g, self.lin_in(v)), graph, x, enabled=on)  # [n_owned, hidden]
        for i in range(1, len(self.convs)):
            h = h + checkpointed(self._block(i), graph, h, enabled=on)
        h = F.relu(apply_norm(self.norms[0], graph, h))
        h = graph.dropout(h, self.dropout, key=len(self.convs), training=self.training)
        return self.lin_out(h)  # [n_owned, out_channels]
