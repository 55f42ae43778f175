"""Scoring node pairs a block at a time: the decoder over rows fetched once, the loss's gradients in the same pass.

A link step's pairs name rows anywhere. :func:`~gnndist.tasks.pairs.fetch_distinct` brings each distinct row
once (bounded by the nodes); what grew with the pairs was each pair's two endpoint rows, ``[2 n_pairs, d]``, their
gradient, their float64 copies and the decoder's activations. Here they exist for one block of pairs at a time
(:func:`block_pairs`: ``PAIR_BLOCK_CELLS / d`` pairs), forward and backward:

    rows, locate = fetch_distinct(h, [pos, neg], N, offsets, grid)  # Fetched: far rows + h; ids -> positions
    loss = pair_loss(decoder, rows, locate, pos, neg, k, total)  # one scalar; its backward is a product
    scores = decode(decoder, rows, locate, pos)                  # no_grad: [n] logits, a block at a time

:func:`pair_loss` computes each block's loss and backpropagates it at once, into the gradients of the far rows
``[n_far, d]`` and of this rank's own rows ``[n_owned, d]`` (read in place: :class:`~gnndist.tasks.pairs.Fetched`)
and the decoder's float64 weight gradients (its forward is the whole pass); its backward returns them times the
incoming gradient (a loss scale, or 1), scaled in place. The encoder's backward then starts from them, as it did
from the pairs'. The sums over pairs stay what they were: each pair's terms are computed
alike, the weights' in float64 (:func:`wide`), so the block size moves nothing past float64's rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.tasks.pairs import Fetched

# endpoint-row cells of one block of pairs (pairs x width): 4 MiB of float32 rows a side, 8 MiB in float64; the
# decoder's activations and their gradients a few times that (benchmarks/link_memory.py)
PAIR_BLOCK_CELLS = 2**20


def block_pairs(width: int) -> int:
    """Pairs scored at once for rows of ``width``: ``PAIR_BLOCK_CELLS // width`` (at least one)."""
    return max(1, PAIR_BLOCK_CELLS // max(1, width))


def wide(decoder: nn.Module, hu: Tensor, hv: Tensor) -> Tensor:
    """``decoder(hu, hv)`` computed in float64 (its weights and buffers cast, autocast off), returned as float32.

    A decoder's weight gradient is a sum over the pairs of a step, which P ranks split P ways: in float32 its
    rounding would depend on P (4e-6 to 4e-5 of the largest gradient, MLP decoder). Summed in float64, each rank's
    share is rounded once, and the shares' all-reduce adds P float32 values: the same bound as every other
    parameter of gnndist's, for any decoder module, built in or the user's, with nothing written for it.

    A decoder without floating-point parameters (the inner product) has no such sum: it runs as it is, in the
    rows' precision (``benchmarks/link_decoder_cost.py``, 200k pairs of width 256, 2 threads: float64 costs the
    inner product 3.3x its forward and backward time and 4x its peak bytes; the MLP 2.3x and 2.8x).

    Shapes:
        hu, hv ``[n, d]`` -> ``[n]`` float32
    """
    return in_float64(decoder, hu, hv) if has_weights(decoder) else decoder(hu, hv).float()


def has_weights(decoder: nn.Module) -> bool:
    """Whether the decoder has floating-point parameters (then it runs in float64: :func:`wide`)."""
    return any(p.is_floating_point() for p in decoder.parameters())


def in_float64(decoder: nn.Module, hu: Tensor, hv: Tensor, state: dict[str, Tensor] | None = None) -> Tensor:
    """``decoder(hu, hv)`` in float64 (its weights and buffers cast, autocast off; or ``state``, their float64
    copies by name), returned as float32. ``[n]``"""
    if state is None:
        state = float64_state(decoder)
    with torch.autocast(hu.device.type, enabled=False):
        return torch.func.functional_call(decoder, state, (hu.double(), hv.double())).float()


def float64_state(decoder: nn.Module, leaves: bool = False) -> dict[str, Tensor]:
    """The decoder's parameters and buffers by name, floating ones cast to float64; ``leaves``: detached copies
    that gather their own (float64) gradients, for the parameters that require one."""
    out = {}
    for name, t in [*decoder.named_parameters(), *decoder.named_buffers()]:
        if t.is_floating_point():
            t = t.detach().double().requires_grad_(t.requires_grad) if leaves else t.double()
        out[name] = t
    return out


Locate = Callable[[Tensor], Tensor]  # node ids -> their rows' positions in the distinct rows


@torch.no_grad()
def decode(decoder: nn.Module, rows: Fetched, locate: Locate, pairs: Tensor) -> Tensor:
    """The decoder's logit of each pair of node ids, their rows ``rows.take(locate(pairs))``, a block of pairs at a
    time (:func:`wide`).

    Shapes:
        rows: width ``d``; pairs ``[n, 2]`` -> ``[n]`` float32
    """
    out = []
    for block in pairs.split(block_pairs(rows.width)):
        i = locate(block)
        out.append(wide(decoder, rows.take(i[:, 0]), rows.take(i[:, 1])))
    return torch.cat(out) if out else rows.near.new_zeros(0, dtype=torch.float32)


def pair_loss(decoder: nn.Module, rows: Fetched, locate: Locate, pos: Tensor, neg: Tensor, k: int,
              total: Tensor) -> Tensor:
    """GAE's and OGB's loss of pairs, ``(sum softplus(-pos) + sum softplus(neg) / k) / total``, scored a block at a
    time; differentiable w.r.t. both parts of ``rows`` and the decoder's parameters.

    Args:
        decoder: the edge decoder (float64 when it has weights: :func:`wide`).
        rows, locate: the distinct endpoint rows and node ids -> their positions
            (:func:`~gnndist.tasks.pairs.fetch_distinct`).
        pos, neg: the positives' and the negatives' node ids.
        k: negatives per positive (each negative's term weighs ``1 / k``).
        total: the global count the sum is divided by (a 0-dim tensor).

    Shapes:
        rows: width ``d``; pos ``[n, 2]``, neg ``[m, 2]`` -> ``[]`` float32
    """
    params = [p for _, p in decoder.named_parameters()]
    return _PairLoss.apply(_Pairs(decoder, locate, pos, neg, k, total), rows.far, rows.near, *params)


class _Pairs:
    """What :class:`_PairLoss` scores: the decoder, the pairs' row positions and the loss's constants."""

    def __init__(self, decoder: nn.Module, locate: Locate, pos: Tensor, neg: Tensor, k: int, total: Tensor):
        self.decoder, self.locate, self.pos, self.neg, self.k, self.total = decoder, locate, pos, neg, k, total

    def loss_and_grads(self, rows: Fetched, want_rows: bool) -> tuple[Tensor, tuple | None, dict[str, Tensor]]:
        """The loss (float64 sum of the blocks'), the rows' gradients (far's, near's) and the parameters' float64
        gradients by name.

        Each block's endpoint rows are float32 leaves of their own; their gradients are added into the rows'
        float32 gradients with ``index_add_`` (the block's pairs only: an autograd ``index_select`` would add a
        whole table a block). Half-precision rows are widened for it: their gradients, here unscaled (about 1 / the
        positives each), would underflow in fp16, where the loss scale used to keep them."""
        decoder = self.decoder
        floating = has_weights(decoder)
        state = float64_state(decoder, leaves=True) if floating else None
        rows = Fetched(rows.far.detach(), rows.near.detach())  # each block's rows are leaves of their own
        g_rows = tuple(torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in rows) if want_rows \
            else None
        acc = torch.zeros((), dtype=torch.float64, device=rows.near.device)
        size = block_pairs(rows.width)
        for pairs, sign, k in ((self.pos, -1.0, 1), (self.neg, 1.0, self.k)):
            for block in pairs.split(size):
                i = self.locate(block)  # [c, 2] the block's rows
                with torch.enable_grad():
                    hu = rows.take(i[:, 0]).float().requires_grad_(want_rows)
                    hv = rows.take(i[:, 1]).float().requires_grad_(want_rows)
                    s = in_float64(decoder, hu, hv, state) if floating else decoder(hu, hv).float()
                    loss = F.softplus(sign * s).sum() / k / self.total
                if loss.requires_grad:
                    loss.backward()
                if want_rows:
                    Fetched.add_at(g_rows, i[:, 0], hu.grad)
                    Fetched.add_at(g_rows, i[:, 1], hv.grad)
                acc += loss.detach().double()
        # a rank without pairs has zero gradients, not none (the all-reduce of gradients takes every parameter's)
        grads = {} if state is None else {n: t.grad if t.grad is not None else torch.zeros_like(t)
                                          for n, t in state.items() if t.requires_grad}
        return acc, g_rows, grads


class _PairLoss(torch.autograd.Function):
    """The pairs' loss whose forward computes its gradients too, a block at a time (no pair's rows outlive their
    block); its backward scales them by the incoming gradient (exact for a power-of-two loss scale, and for 1), in
    place: the step's graph is backpropagated once (a second backward raises)."""

    @staticmethod
    def forward(ctx, pairs: _Pairs, far: Tensor, near: Tensor, *params: Tensor) -> Tensor:
        want = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        loss, g_rows, grads = pairs.loss_and_grads(Fetched(far, near), want)
        names = [n for n, _ in pairs.decoder.named_parameters()]
        g_params = [grads[n].to(p.dtype) if n in grads and ctx.needs_input_grad[3 + j] else None
                    for j, (n, p) in enumerate(zip(names, params))]
        ctx.g_rows, ctx.g_params = g_rows, g_params  # not saved tensors: scaled in place below
        ctx.dtypes = (far.dtype, near.dtype)
        return loss.float()

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.g_params is None:
            raise RuntimeError("the link loss's graph was backpropagated twice: its gradients were handed over")
        g_rows, g_params = ctx.g_rows, ctx.g_params
        ctx.g_rows = ctx.g_params = None
        # the rows' in float32: scaled, then in the rows' dtype
        rows = (None, None) if g_rows is None else tuple(g.mul_(grad.float()).to(d) for g, d in zip(g_rows, ctx.dtypes))
        return (None, *rows, *(None if g is None else g.mul_(grad.to(g.dtype)) for g in g_params))
