"""RevGNN of Li et al., "Training Graph Neural Networks with 1000 Layers" (https://arxiv.org/abs/2106.07476).

Grouped reversible blocks: the channels are split into ``G`` groups and every block is
invertible, so backward recomputes each block's input from its output instead of keeping
it. Activation memory is that of one block whatever the depth. The recomputation runs
each block's convolutions again, halo exchanges included (counted by the byte counter),
and is exact: dropout masks are hashes of (seed, epoch, key, node id).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.errors import UserError
from gnndist.nn.norm import apply_norm, frozen_statistics, make_norm
from gnndist.nn.sage_conv import SAGEConv


class RevBranch(nn.Module):
    r"""One group's function :math:`F(h) = \mathrm{conv}(\mathrm{drop}(\mathrm{ReLU}(\mathrm{norm}(h))))` (pre-activation).

    Args:
        channels: the group's width.
        norm: ``"batch"``, ``"layer"`` or ``"none"``.
        dropout: dropout probability (partition-invariant masks under ``key``).
        key: dropout key of this branch.

    Shapes:
        h ``[n_owned, channels]`` -> ``[n_owned, channels]``
    """

    def __init__(self, channels: int, norm: str, dropout: float, key: int):
        super().__init__()
        self.norm = make_norm(norm, channels)
        self.conv = SAGEConv(channels, channels)
        self.dropout, self.key = dropout, key

    def forward(self, graph, h: Tensor) -> Tensor:
        h = F.relu(apply_norm(self.norm, graph, h))
        h = graph.dropout(h, self.dropout, key=self.key, training=self.training)
        return self.conv(graph, h)


class GroupAddRev(nn.Module):
    r"""Grouped reversible block: :math:`y_i = x_i + F_i(y_{i-1})`, :math:`y_0 = \sum_{j \ge 2} x_j`, ``i = 1..G``.

    Inverse, from ``i = G`` down to 1: :math:`x_i = y_i - F_i(y_{i-1})` (with :math:`y_0`
    from the already recovered :math:`x_2..x_G`). :meth:`backward_step` does the inverse
    and the block's backward in one pass: each :math:`F_i` runs once, with grad, on its
    known input.

    Args:
        branches: the ``G >= 2`` functions :math:`F_i`, each ``[n, C / G] -> [n, C / G]``.

    Shapes:
        x ``[n_owned, C]`` -> ``[n_owned, C]``
    """

    def __init__(self, branches: list[nn.Module]):
        super().__init__()
        if len(branches) < 2:
            raise ValueError("a grouped reversible block needs at least 2 groups")
        self.branches = nn.ModuleList(branches)

    def forward(self, graph, x: Tensor) -> Tensor:
        xs = x.chunk(len(self.branches), dim=1)  # G x [n_owned, C / G]
        y = sum(xs[1:])
        ys = []
        for fn, xi in zip(self.branches, xs):
            y = xi + fn(graph, y)
            ys.append(y)
        return torch.cat(ys, dim=1)

    def backward_step(self, graph, y: Tensor, grad_y: Tensor) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """Recover the input from ``y`` and back-propagate ``grad_y`` through the block.

        Returns ``(x, grad_x, grads)``, ``grads`` in the order of ``self.parameters()``
        (``None`` where a parameter has none).
        """
        G = len(self.branches)
        ys = list(y.chunk(G, dim=1))
        gys = list(grad_y.chunk(G, dim=1))
        xs: list[Tensor] = list(ys)  # overwritten with the recovered inputs, last group first
        gxs: list[Tensor] = list(gys)  # and with their gradients
        grads: list[Tensor | None] = []
        for i in range(G - 1, -1, -1):
            fn = self.branches[i]
            inp = (ys[i - 1] if i > 0 else sum(xs[1:])).detach().requires_grad_()  # [n_owned, C / G]
            params = list(fn.parameters())
            with torch.enable_grad():
                f = fn(graph, inp)
            xs[i] = ys[i] - f.detach()
            gxs[i] = gys[i]
            g_inp, *g_params = torch.autograd.grad(f, [inp, *params], gys[i], allow_unused=True)
            grads = g_params + grads
            if i > 0:
                gys[i - 1] = gys[i - 1] + g_inp
            else:
                gxs[1:] = [g + g_inp for g in gxs[1:]]
        return torch.cat(xs, dim=1), torch.cat(gxs, dim=1), grads


class _Reversible(torch.autograd.Function):
    """Runs reversible blocks keeping only the last output; backward recovers every input from its output."""

    @staticmethod
    def forward(ctx, x: Tensor, model: RevGNN, graph, *params: Tensor) -> Tensor:
        ctx.model, ctx.graph = model, graph
        for block in model.blocks:  # grad is off inside Function.forward: no activation is kept
            if model.trace is not None:
                model.trace["stored"].append(x.clone())
            x = block(graph, x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: Tensor):
        model, graph = ctx.model, ctx.graph
        (y,) = ctx.saved_tensors
        grads: list[Tensor | None] = []
        with frozen_statistics():  # the forward updated the running statistics once already
            for block in reversed(model.blocks):
                y, grad, g = block.backward_step(graph, y, grad)
                if model.trace is not None:
                    model.trace["recomputed"].insert(0, y.clone())
                grads = g + grads
        return (grad, None, None, *grads)


class RevGNN(nn.Module):
    r"""RevGNN: dropout + linear, ``layers`` grouped reversible blocks of SAGE convolutions, norm + ReLU, linear.

    Each block splits ``hidden`` channels into ``groups`` and applies
    :class:`GroupAddRev` with :class:`RevBranch` functions (norm, ReLU, dropout, SAGEConv
    with mean aggregation through ``graph.spmm``: the run's strategy). With
    ``reversible=True`` (default) training keeps no block activations: backward
    recomputes every block's input from its output (:class:`GroupAddRev.backward_step`).
    ``reversible=False`` is the same function trained with plain autograd.

    Args:
        in_channels, hidden, out_channels: widths (``hidden`` divisible by ``groups``).
        layers: number of reversible blocks (>= 1).
        dropout: dropout probability of the input, inside every branch and before the output layer.
        norm: ``"batch"``, ``"layer"`` or ``"none"``, in every branch and before the output.
        groups: channel groups ``G >= 2`` (default ``2``).
        reversible: recompute inputs from outputs in backward (default ``True``).

    Attributes:
        trace: ``None``, or a dict whose ``"stored"`` list collects each block's input in
            forward and ``"recomputed"`` the inputs backward recovers (for tests).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 7, dropout: float = 0.5,
                 norm: str = "layer", groups: int = 2, reversible: bool = True):
        super().__init__()
        if hidden % groups:
            raise UserError(f"--model revgnn splits --hidden into {groups} groups: {hidden} is not divisible by {groups}")
        c = hidden // groups
        self.lin_in = nn.Linear(in_channels, hidden)
        self.blocks = nn.ModuleList(
            GroupAddRev([RevBranch(c, norm, dropout, key=1 + i * groups + g) for g in range(groups)])
            for i in range(layers))
        for i, block in enumerate(self.blocks):
            for g, branch in enumerate(block.branches):
                branch.conv.tag = f"layer{i}.{g}"
        self.norm = make_norm(norm, hidden)
        self.lin_out = nn.Linear(hidden, out_channels)
        self.dropout, self.reversible = dropout, reversible
        self.trace: dict[str, list[Tensor]] | None = None

    @property
    def recompute(self) -> bool:
        """Checkpointing is off: reversibility already recomputes every block."""
        return False

    @recompute.setter
    def recompute(self, on: bool) -> None:
        if on:
            raise UserError("--recompute is for non-reversible models: --model revgnn recomputes its blocks already")

    def forward(self, graph, x: Tensor) -> Tensor:
        x = graph.dropout(x, self.dropout, key=1 + len(self.blocks) * len(self.blocks[0].branches),
                          training=self.training)
        x = self.lin_in(x)  # [n_owned, hidden]
        if self.reversible and self.training and torch.is_grad_enabled():
            x = _Reversible.apply(x, self, graph, *self.blocks.parameters())
        else:
            for block in self.blocks:
                x = block(graph, x)
        x = F.relu(apply_norm(self.norm, graph, x))
        x = graph.dropout(x, self.dropout, key=0, training=self.training)
        return self.lin_out(x)  # [n_owned, out_channels]
