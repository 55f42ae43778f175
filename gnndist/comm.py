"""Halo exchange over ``all_to_all`` as an autograd function, and the one byte counter.

Forward sends each rank's owned rows named by the send plan to the ranks that need them;
backward sends the halo gradients home, where they are summed into the owners' rows.
Communication code does not time itself: it reports bytes to the injected counter.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass
class ByteCounter:
    """Bytes sent and received, keyed by (tag, direction) where direction is ``fwd`` or ``bwd``."""

    sent: dict = field(default_factory=lambda: defaultdict(int))
    received: dict = field(default_factory=lambda: defaultdict(int))

    def add(self, tag: str, direction: str, sent: int, received: int) -> None:
        self.sent[(tag, direction)] += sent
        self.received[(tag, direction)] += received

    @property
    def bytes_sent(self) -> int:
        return sum(self.sent.values())

    @property
    def bytes_received(self) -> int:
        return sum(self.received.values())

    def per_tag(self) -> dict[str, dict[str, int]]:
        """``{tag: {"fwd_sent", "fwd_received", "bwd_sent", "bwd_received"}}``."""
        out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for (tag, d), v in self.sent.items():
            out[tag][f"{d}_sent"] += v
        for (tag, d), v in self.received.items():
            out[tag][f"{d}_received"] += v
        return {k: dict(v) for k, v in out.items()}

    def reset(self) -> None:
        self.sent.clear()
        self.received.clear()


@dataclass
class HaloPlan:
    """Who sends which owned rows to whom; the halo arrives grouped by owner rank."""

    send_idx: Tensor  # [sum send_counts] owned local ids, grouped by destination rank
    send_counts: list[int]  # [P]
    recv_counts: list[int]  # [P]

    @property
    def n_send(self) -> int:
        return sum(self.send_counts)

    @property
    def n_halo(self) -> int:
        return sum(self.recv_counts)


class PendingHalo:
    """An exchange in flight: ``wait()`` returns the received halo rows ``[n_halo, F]``."""

    def __init__(self, x_owned: Tensor, plan: HaloPlan, counter: ByteCounter | None, tag: str):
        self.plan = plan
        self.counter = counter
        self.tag = tag
        send = x_owned.detach()[plan.send_idx]  # [n_send, F]
        self.recv = send.new_empty((plan.n_halo,) + tuple(x_owned.shape[1:]))  # [n_halo, F]
        if counter is not None:
            counter.add(tag, "fwd", plan.n_send * _row_bytes(x_owned), plan.n_halo * _row_bytes(x_owned))
        self.work = None
        if dist.is_initialized() and dist.get_world_size() > 1:
            self.work = dist.all_to_all_single(self.recv, send, plan.recv_counts, plan.send_counts, async_op=True)
        else:
            self.recv = send  # one rank: nothing to exchange

    def wait(self) -> Tensor:
        if self.work is not None:
            self.work.wait()
            self.work = None
        return self.recv


def _row_bytes(x: Tensor) -> int:
    return (x.numel() // max(x.shape[0], 1)) * x.element_size() if x.dim() else x.element_size()


class _HaloWait(torch.autograd.Function):
    """Forward: wait for the pending exchange. Backward: return halo gradients to their owners."""

    @staticmethod
    def forward(ctx, x_owned: Tensor, pending: PendingHalo) -> Tensor:
        ctx.plan = pending.plan
        ctx.counter = pending.counter
        ctx.tag = pending.tag
        ctx.owned_shape = x_owned.shape
        return pending.wait()

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        plan: HaloPlan = ctx.plan
        grad_halo = grad_halo.contiguous()
        back = grad_halo.new_empty((plan.n_send,) + tuple(grad_halo.shape[1:]))  # [n_send, F]
        if ctx.counter is not None:
            ctx.counter.add(ctx.tag, "bwd", plan.n_halo * _row_bytes(grad_halo), plan.n_send * _row_bytes(grad_halo))
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_to_all_single(back, grad_halo, plan.send_counts, plan.recv_counts)
        else:
            back = grad_halo
        grad = grad_halo.new_zeros(ctx.owned_shape)
        grad.index_add_(0, plan.send_idx, back)
        return grad, None


def halo_start(x_owned: Tensor, plan: HaloPlan, counter: ByteCounter | None = None, tag: str = "halo") -> PendingHalo:
    """Launch the exchange of ``x_owned``'s send rows without blocking.

    Shapes:
        x_owned ``[n_owned, *]``
    """
    return PendingHalo(x_owned.contiguous(), plan, counter, tag)


def halo_wait(x_owned: Tensor, pending: PendingHalo) -> Tensor:
    """Finish ``pending`` and return the halo rows, differentiable w.r.t. ``x_owned``.

    Shapes:
        x_owned ``[n_owned, *]`` -> halo ``[n_halo, *]``
    """
    return _HaloWait.apply(x_owned, pending)


def halo_exchange(x_owned: Tensor, plan: HaloPlan, counter: ByteCounter | None = None, tag: str = "halo") -> Tensor:
    """Blocking halo exchange: :func:`halo_start` then :func:`halo_wait`.

    Shapes:
        x_owned ``[n_owned, *]`` -> halo ``[n_halo, *]``
    """
    return halo_wait(x_owned, halo_start(x_owned, plan, counter, tag))


class AllReduceSum(torch.autograd.Function):
    """Differentiable global sum: forward all-reduces; backward all-reduces the gradient.

    Each rank's loss is its share of the global loss, so the gradient of a globally
    reduced quantity is the sum over ranks of the per-rank gradients.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        x = x.clone()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        grad = grad.clone()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(grad)
        return grad
