"""RevGNN of Li et al., "Training Graph Neural Networks with 1000 Layers" (https://arxiv.org/abs/2106.07476).

Grouped reversible blocks: the channels are split into ``G`` groups and every block is
invertible, so backward recomputes each block's input from its output instead of keeping
it. Activation memory is that of one block whatever the depth. The recomputation runs
each block's convolutions again, halo exchanges included (counted by the byte counter).

The inverse is exact by construction, bit for bit. In floating point it could not be:
``fl(fl(x + F) - F) != x``, and the rounding error of an input recovered from a large
residual state is carried down through every block below it (with float states, RevGNN on
Cora at 16 blocks recovered its first block's input with a relative error of 1e-3, and its
training drifted from the same model with stored activations by 4e-2 in 20 epochs). So the
state passed between blocks is fixed point, as in reversible RNNs (MacKay et al. 2018,
https://arxiv.org/abs/1810.10999): an int64 tensor ``z = round(v * 2**FRACTION_BITS)``. A
block adds each branch's output quantised to the same grid (an exact integer addition) and
feeds the branches the float32 of the state; the inverse subtracts the same quantised
output and recovers ``z`` exactly. That needs each branch to give the same bits when run
again on the same input: dropout masks are hashes of (seed, epoch, key, node id), the
aggregation kernels are deterministic, and backward reruns the branches under the forward's
autocast. Under ``--precision bf16|fp16`` the branches read the fp32 of the state (autocast casts
it for their linear maps) and their half outputs enter the state through :func:`to_fixed`: the
half value, exactly as fp32, times ``2**32``, rounded (exact for ``|f| >= 2**-21`` in bf16 and fp16:
their 8 / 11 significant bits then lie on the grid; smaller values round the same way every time).
The state stays int64 and its additions exact: only the branches' own arithmetic is half. Gradients treat
the quantisation as the identity (straight-through), and training with stored activations
(``reversible=False``) runs the same fixed-point function: the same losses and gradients.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.errors import UserError
from gnndist.nn.conv.sage_conv import SAGEConv
from gnndist.nn.norm import apply_norm, make_norm

log = logging.getLogger("gnndist")

FRACTION_BITS = 32  # the state is round(v * 2**32) in int64: resolution 2**-32 ~ 2.3e-10
RANGE = 2.0**30  # bound on |state| and |F| (x (G - 1) for the group sums): every int64 sum stays below 2**63


def to_fixed(x: Tensor) -> Tensor:
    """``round(x * 2**FRACTION_BITS)`` as int64; NaN and values beyond :data:`RANGE` are clamped into it.

    Shapes:
        x ``[n, C]`` float -> ``[n, C]`` int64
    """
    x = x.detach().float().nan_to_num(0.0, RANGE, -RANGE).clamp_(-RANGE, RANGE)  # half: exactly its fp32 value
    return x.mul_(2.0**FRACTION_BITS).round_().long()  # * 2**32 is exact in float32


def to_float(z: Tensor) -> Tensor:
    """The float32 nearest to the fixed-point ``z`` (what the branches read).

    Shapes:
        z ``[n, C]`` int64 -> ``[n, C]`` float32
    """
    return z.float().mul_(2.0**-FRACTION_BITS)


def _amax(f: Tensor) -> Tensor:
    """``max|f|`` as a 0-dim tensor (0 for an empty ``f``; NaN if ``f`` has one)."""
    return f.detach().abs().amax() if f.numel() else f.new_zeros(())


class _Carry(torch.autograd.Function):
    """``to_float(z)`` whose gradient flows to each of ``parts``: the float sum that ``z`` is, in fixed point."""

    @staticmethod
    def forward(ctx, z: Tensor, *parts: Tensor) -> Tensor:
        ctx.parts = len(parts)
        return to_float(z)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return (None, *[grad] * ctx.parts)


def _read(z: Tensor, parts: list[Tensor | None]) -> Tensor:
    """The float32 of state ``z``; with autograd ``parts`` (stored activations), differentiable as their sum."""
    return to_float(z) if parts[0] is None else _Carry.apply(z, *parts)


class RevBranch(nn.Module):
    r"""One group's function :math:`F(h) = \mathrm{conv}(\mathrm{drop}(\mathrm{ReLU}(\mathrm{norm}(h))))`
    (pre-activation).

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
    r"""Grouped reversible block in fixed point: :math:`y_i = x_i + q(F_i(y_{i-1}))`,
    :math:`y_0 = \sum_{j \ge 2} x_j`, ``i = 1..G``.

    States ``x``, ``y`` are int64 fixed point (:func:`to_fixed`); :math:`F_i` reads the
    float32 of its input (:func:`to_float`) and :math:`q` = :func:`to_fixed` puts its
    output on the grid, so every addition is exact. Inverse, from ``i = G`` down to 1:
    :math:`x_i = y_i - q(F_i(y_{i-1}))` (with :math:`y_0` from the already recovered
    :math:`x_2..x_G`), bit for bit. :meth:`backward_step` does the inverse and the block's
    backward in one pass: each :math:`F_i` runs once, with grad, on its known input.

    Args:
        branches: the ``G >= 2`` functions :math:`F_i`, each ``[n, C / G] -> [n, C / G]``.

    Shapes:
        z ``[n_owned, C]`` int64, h ``[n_owned, C]`` float32 or ``None`` -> the same
    """

    def __init__(self, branches: list[nn.Module]):
        super().__init__()
        if len(branches) < 2:
            raise ValueError("a grouped reversible block needs at least 2 groups")
        self.branches = nn.ModuleList(branches)

    def forward(self, graph, z: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor | None, Tensor]:
        """The block on state ``z``; returns ``(z_out, h_out, added)``.

        ``h`` (stored activations) is ``to_float(z)`` with autograd history, and ``h_out``
        is ``to_float(z_out)`` differentiable through the branches; ``added`` is
        :math:`\\sum_i \\max |F_i|`, for the range bound.
        """
        G = len(self.branches)
        zs = list(z.chunk(G, dim=1))  # G x [n_owned, C / G]
        hs = list(h.chunk(G, dim=1)) if h is not None else [None] * G
        zy = sum(zs[1:])
        hy = _read(zy, hs[1:])
        added = z.new_zeros((), dtype=torch.float32)
        for i, fn in enumerate(self.branches):
            f = fn(graph, hy)
            added = added + _amax(f)
            zy = zs[i] + to_fixed(f)
            hy = _read(zy, [hs[i], f])
            zs[i], hs[i] = zy, hy
        return torch.cat(zs, dim=1), (torch.cat(hs, dim=1) if h is not None else None), added

    def backward_step(self, graph, z: Tensor, grad: Tensor) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """Recover the input state from the output state ``z`` and back-propagate ``grad`` through the block.

        Returns ``(z_in, grad_in, grads)``, ``grads`` in the order of ``self.parameters()``
        (``None`` where a parameter has none).
        """
        G = len(self.branches)
        zs = list(z.chunk(G, dim=1))  # overwritten with the recovered inputs, last group first
        gs = list(grad.chunk(G, dim=1))  # and with their gradients
        grads: list[Tensor | None] = []
        for i in range(G - 1, -1, -1):
            fn = self.branches[i]
            inp = to_float(zs[i - 1] if i > 0 else sum(zs[1:])).requires_grad_()  # [n_owned, C / G]
            params = list(fn.parameters())
            with torch.enable_grad():
                f = fn(graph, inp)
            zs[i] = zs[i] - to_fixed(f)
            g_inp, *g_params = torch.autograd.grad(f, [inp, *params], gs[i], allow_unused=True)
            grads = g_params + grads
            if i > 0:
                gs[i - 1] = gs[i - 1] + g_inp
            else:
                gs[1:] = [g + g_inp for g in gs[1:]]
        return torch.cat(zs, dim=1), torch.cat(gs, dim=1), grads


class _Reversible(torch.autograd.Function):
    """Runs reversible blocks keeping only the last state; backward recovers every input from its output."""

    @staticmethod
    def forward(ctx, x: Tensor, model: RevGNN, graph, *params: Tensor) -> tuple[Tensor, Tensor]:
        ctx.model, ctx.graph, dev = model, graph, x.device.type
        # backward reruns the branches as the forward ran them: the same autocast, so the same bits
        ctx.autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        z, bound = to_fixed(x), _amax(x)
        for block in model.blocks:  # grad is off inside Function.forward: no activation is kept
            if model.trace is not None:
                model.trace["stored"].append(z.clone())
            z, _, added = block(graph, z)
            bound = bound + added
        ctx.save_for_backward(z)  # [n_owned, hidden] int64: the only state kept
        ctx.mark_non_differentiable(bound)
        return to_float(z), bound

    @staticmethod
    def backward(ctx, grad: Tensor, _):
        model, graph = ctx.model, ctx.graph
        (z,) = ctx.saved_tensors
        grads: list[Tensor | None] = []
        dev, enabled, dtype = ctx.autocast
        # the forward updated the running statistics once already
        with graph.context.frozen_statistics(), torch.autocast(dev, dtype=dtype, enabled=enabled):
            for block in reversed(model.blocks):
                z, grad, g = block.backward_step(graph, z, grad)
                if model.trace is not None:
                    model.trace["recomputed"].insert(0, z.clone())
                grads = g + grads
        return (grad, None, None, *grads)


class RevGNN(nn.Module):
    r"""RevGNN: dropout + linear, ``layers`` grouped reversible blocks of SAGE convolutions, norm + ReLU, linear.

    Each block splits ``hidden`` channels into ``groups`` and applies
    :class:`GroupAddRev` with :class:`RevBranch` functions (norm, ReLU, dropout, SAGEConv
    with mean aggregation through ``graph.spmm``: the run's strategy) on a fixed-point
    state (:data:`FRACTION_BITS` = 32 fractional bits in int64). With ``reversible=True``
    (default) training keeps no block activations: backward recovers every block's input
    state from its output exactly (:meth:`GroupAddRev.backward_step`).
    ``reversible=False`` is the same function trained with plain autograd.

    Range: the fixed point holds ``|v| < 2**31`` at a resolution of ``2**-32``. Each forward
    bounds every value the blocks add or sum by ``max|x| + sum max|F|`` over the blocks
    (no synchronisation per block); if ``(G - 1)`` times that bound reaches :data:`RANGE`
    (``2**30``), no int64 sum can be trusted: a warning says so and the output is NaN, so
    that every rank stops at the trainer's finite-loss check together.

    Args:
        in_channels: input width.
        hidden: hidden width (divisible by ``groups``).
        out_channels: output width.
        layers: number of reversible blocks (>= 1).
        dropout: dropout probability of the input, inside every branch and before the output layer.
        norm: ``"batch"``, ``"layer"`` or ``"none"``, in every branch and before the output.
        groups: channel groups ``G >= 2`` (default ``2``).
        reversible: recompute inputs from outputs in backward (default ``True``).

    Attributes:
        trace: ``None``, or a dict whose ``"stored"`` list collects each block's input state
            (int64) in forward and ``"recomputed"`` the states backward recovers (for tests).

    Shapes:
        x ``[n_owned, in_channels]`` -> ``[n_owned, out_channels]``
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 7, dropout: float = 0.5,
                 norm: str = "layer", groups: int = 2, reversible: bool = True):
        super().__init__()
        if hidden % groups:
            raise UserError(f"--model revgnn splits --hidden into {groups} groups: {hidden} is not divisible "
                            f"by {groups}")
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
        self.dropout, self.reversible, self.groups = dropout, reversible, groups
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
        x = graph.dropout(x, self.dropout, key=1 + len(self.blocks) * self.groups, training=self.training,
                          sparse=True)
        x = self.lin_in(x)  # [n_owned, hidden]
        if self.reversible and self.training and torch.is_grad_enabled():
            x, bound = _Reversible.apply(x, self, graph, *self.blocks.parameters())
        else:
            z, bound = to_fixed(x), _amax(x)
            x = _Carry.apply(z, x)  # [n_owned, hidden]: to_float(z), differentiable as x
            for block in self.blocks:
                z, x, added = block(graph, z, x)
                bound = bound + added
        if not bool(bound * max(self.groups - 1, 1) < RANGE):  # one synchronisation per forward; NaN fails too
            log.warning(f"RevGNN: the fixed-point state of the reversible blocks left its range (a bound on "
                        f"|value| reached {float(bound):.3g}, the limit is 2**30 / (groups - 1)): the output is "
                        f"NaN; lower --lr, use --norm layer or batch, or fewer --layers")
            x = x + float("nan")
        x = F.relu(apply_norm(self.norm, graph, x))
        x = graph.dropout(x, self.dropout, key=0, training=self.training)
        return self.lin_out(x)  # [n_owned, out_channels]
