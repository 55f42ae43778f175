"""Row exchanges over ``all_to_all`` on a grid axis as autograd functions, and the one byte counter.

Two adjoint operations make every strategy: the *gather* (halo exchange) sends rows a
rank owns to the ranks whose nonzeros need them, and its backward sends the gradients
home, summed into the owners' rows; the *fold* sends partial output rows to their owners,
summed there, and its backward gathers the owners' gradients.
Communication code does not time itself: it reports bytes to the injected counter, and
the time it waits to the counter's optional timer (:mod:`gnndist.dist.timing`, phase ``comm``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gnndist.dist.grid import Axis, ProcessGrid
from gnndist.dist.timing import PhaseTimer, phase


@dataclass
class ByteCounter:
    """Bytes sent and received, keyed by (tag, direction) where direction is ``fwd`` or ``bwd``.

    ``timer``, when set, hears the seconds the exchanges wait for their rows (phase ``comm``).
    """

    sent: dict = field(default_factory=lambda: defaultdict(int))
    received: dict = field(default_factory=lambda: defaultdict(int))
    timer: PhaseTimer | None = None

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
class ExchangePlan:
    """Which local rows travel between the ranks of one grid axis, and how many arrive from each.

    A *gather* (the halo exchange) sends ``x[send_idx]`` to the ranks that need the rows and
    returns the arriving rows grouped by source; its adjoint, the *fold*, sends rows the
    other way and sums them into ``send_idx``. Counts are indexed by position on the axis.
    The rows travel through ``grid``'s collectives on ``axis`` (no grid: one process, nothing travels).
    """

    send_idx: Tensor  # [sum send_counts] local row ids, grouped by destination
    send_counts: list[int]  # [axis size]
    recv_counts: list[int]  # [axis size]
    grid: ProcessGrid | None = None  # the collectives' grid (None: one process)
    axis: Axis | str = "world"  # the grid axis the rows travel on
    wire: torch.dtype | None = None  # dtype the rows travel in (e.g. bfloat16: half the bytes); None: their own

    @property
    def n_send(self) -> int:
        return sum(self.send_counts)

    @property
    def n_recv(self) -> int:
        return sum(self.recv_counts)

    @property
    def peers(self) -> int:
        """Messages of one exchange: the larger of the ranks sent to and the ranks received from."""
        return max(sum(1 for c in self.send_counts if c), sum(1 for c in self.recv_counts if c))


def _timer(counter: ByteCounter | None) -> PhaseTimer | None:
    return counter.timer if counter is not None else None


def _row_bytes(x: Tensor, wire: torch.dtype | None = None) -> int:
    """Bytes of one row of ``x`` on the wire (in ``wire`` when given)."""
    elem = wire.itemsize if wire is not None and x.is_floating_point() else x.element_size()
    return (x.numel() // max(x.shape[0], 1)) * elem if x.dim() else elem


def _to_wire(rows: Tensor, plan: ExchangePlan) -> Tensor:
    return rows.to(plan.wire) if plan.wire is not None and rows.is_floating_point() else rows


def _exchange(rows: Tensor, out_counts: list[int], in_counts: list[int], plan: ExchangePlan,
              async_op: bool = False):
    """All-to-all of ``rows`` (grouped by destination, ``in_counts``) on ``plan``'s axis; ``(out, work)``."""
    grid = plan.grid
    if len(in_counts) > 1 and grid is not None and grid.distributed:
        out = rows.new_empty((sum(out_counts),) + tuple(rows.shape[1:]))
        work = grid.all_to_all_single(out, rows, out_counts, in_counts, plan.axis, async_op=async_op)
        return out, work
    return rows, None  # an axis of one rank: nothing leaves (plans never send to self)


def _axis_name(plan: ExchangePlan) -> str:
    return plan.axis if isinstance(plan.axis, str) else plan.axis.name


class PendingGather:
    """A gather in flight: ``wait()`` returns the received rows ``[n_recv, F]``.

    ``direction``: what the counter books the bytes under (``"bwd"``: a backward's exchange of gradients).
    """

    def __init__(self, x: Tensor, plan: ExchangePlan, counter: ByteCounter | None, tag: str, direction: str = "fwd"):
        self.plan, self.counter, self.tag = plan, counter, tag
        send = _to_wire(x.detach()[plan.send_idx], plan)  # [n_send, F]
        if counter is not None:
            counter.add(tag, direction, plan.n_send * _row_bytes(x, plan.wire),
                        plan.n_recv * _row_bytes(x, plan.wire))
        self.dtype = x.dtype
        self.recv, self.work = _exchange(send, plan.recv_counts, plan.send_counts, plan, async_op=True)

    def wait(self) -> Tensor:
        if self.work is not None:
            with phase(_timer(self.counter), "comm"):
                self.plan.grid.wait(self.work, f"the gather of {self.tag} on {_axis_name(self.plan)}")
            self.work = None
        return self.recv.to(self.dtype)  # arithmetic in the rows' own dtype


def _gather_rows(x: Tensor, plan: ExchangePlan) -> Tensor:
    """Forward of a gather, blocking: ``x[send_idx]`` out, ``[n_recv, F]`` in."""
    out, work = _exchange(_to_wire(x[plan.send_idx], plan).contiguous(), plan.recv_counts, plan.send_counts,
                          plan)
    return out.to(x.dtype)


def _fold_rows(rows: Tensor, plan: ExchangePlan, n_out: int) -> Tensor:
    """Adjoint of a gather: send ``rows`` (in arrival order) back and sum them into ``send_idx``."""
    back, _ = _exchange(_to_wire(rows, plan).contiguous(), plan.send_counts, plan.recv_counts, plan)  # [n_send, F]
    out = rows.new_zeros((n_out,) + tuple(rows.shape[1:]))
    return out.index_add_(0, plan.send_idx, back.to(rows.dtype))  # summed in the rows' own dtype


class _GatherWait(torch.autograd.Function):
    """Forward: finish the pending gather. Backward: fold the received rows' gradients home."""

    @staticmethod
    def forward(ctx, x: Tensor, pending: PendingGather) -> Tensor:
        ctx.plan, ctx.counter, ctx.tag, ctx.n = pending.plan, pending.counter, pending.tag, x.shape[0]
        return pending.wait()

    @staticmethod
    def backward(ctx, grad: Tensor):
        plan: ExchangePlan = ctx.plan
        if ctx.counter is not None:
            ctx.counter.add(ctx.tag, "bwd", plan.n_recv * _row_bytes(grad, plan.wire),
                            plan.n_send * _row_bytes(grad, plan.wire))
        with phase(_timer(ctx.counter), "comm"):  # a blocking exchange: all of it is waiting
            return _fold_rows(grad, plan, ctx.n), None


class PendingFold:
    """A fold in flight: ``wait()`` returns the owners' sums ``[n_out, F]`` (``direction`` as for
    :class:`PendingGather`)."""

    def __init__(self, rows: Tensor, plan: ExchangePlan, n_out: int, counter: ByteCounter | None, tag: str,
                 direction: str = "fwd"):
        self.plan, self.n_out, self.counter, self.tag = plan, n_out, counter, tag
        if counter is not None:
            counter.add(tag, direction, plan.n_recv * _row_bytes(rows, plan.wire),
                        plan.n_send * _row_bytes(rows, plan.wire))
        self.dtype = rows.dtype
        self.back, self.work = _exchange(_to_wire(rows.detach(), plan).contiguous(), plan.send_counts,
                                         plan.recv_counts, plan, async_op=True)  # [n_send, F]

    def wait(self) -> Tensor:
        if self.work is not None:
            with phase(_timer(self.counter), "comm"):
                self.plan.grid.wait(self.work, f"the fold of {self.tag} on {_axis_name(self.plan)}")
            self.work = None
        out = self.back.new_zeros((self.n_out,) + tuple(self.back.shape[1:]), dtype=self.dtype)
        return out.index_add_(0, self.plan.send_idx, self.back.to(self.dtype))  # summed in the rows' own dtype


class _FoldWait(torch.autograd.Function):
    """Forward: finish the pending fold. Backward: gather the owners' gradients to the partial rows."""

    @staticmethod
    def forward(ctx, rows: Tensor, pending: PendingFold) -> Tensor:
        ctx.plan, ctx.counter, ctx.tag = pending.plan, pending.counter, pending.tag
        return pending.wait()

    @staticmethod
    def backward(ctx, grad: Tensor):
        plan: ExchangePlan = ctx.plan
        if ctx.counter is not None:
            ctx.counter.add(ctx.tag, "bwd", plan.n_send * _row_bytes(grad, plan.wire),
                            plan.n_recv * _row_bytes(grad, plan.wire))
        with phase(_timer(ctx.counter), "comm"):  # a blocking exchange: all of it is waiting
            return _gather_rows(grad.contiguous(), plan), None


def gather_start(x: Tensor, plan: ExchangePlan, counter: ByteCounter | None = None, tag: str = "halo") -> PendingGather:
    """Launch the gather of ``x[plan.send_idx]`` to the ranks that need the rows, without blocking.

    Shapes:
        x ``[n_local, *]``
    """
    return PendingGather(x.contiguous(), plan, counter, tag)


def gather_wait(x: Tensor, pending: PendingGather) -> Tensor:
    """Finish ``pending``; the rows are differentiable w.r.t. ``x`` (backward folds them home).

    Shapes:
        x ``[n_local, *]`` -> ``[n_recv, *]``
    """
    return _GatherWait.apply(x, pending)


def gather(x: Tensor, plan: ExchangePlan, counter: ByteCounter | None = None, tag: str = "halo") -> Tensor:
    """Blocking gather (the halo exchange): :func:`gather_start` then :func:`gather_wait`.

    Shapes:
        x ``[n_local, *]`` -> ``[n_recv, *]``
    """
    return gather_wait(x, gather_start(x, plan, counter, tag))


def fold_start(rows: Tensor, plan: ExchangePlan, n_out: int, counter: ByteCounter | None = None,
               tag: str = "fold") -> PendingFold:
    """Launch the fold of partial ``rows`` to their owners without blocking (see :func:`fold`).

    Shapes:
        rows ``[n_recv, *]``
    """
    return PendingFold(rows, plan, n_out, counter, tag)


def fold_wait(rows: Tensor, pending: PendingFold) -> Tensor:
    """Finish ``pending``; the sums are differentiable w.r.t. ``rows`` (backward gathers them back).

    Shapes:
        rows ``[n_recv, *]`` -> ``[n_out, *]``
    """
    return _FoldWait.apply(rows, pending)


def fold(rows: Tensor, plan: ExchangePlan, n_out: int, counter: ByteCounter | None = None, tag: str = "fold") -> Tensor:
    """Sum partial rows into their owners' rows (the sparse reduce-scatter); adjoint of :func:`gather`.

    ``rows`` are in the order a gather with ``plan`` would deliver them; the result holds,
    on every rank, the sum of the rows sent to each of its ``plan.send_idx``.

    Shapes:
        rows ``[n_recv, *]`` -> ``[n_out, *]``
    """
    return fold_wait(rows, fold_start(rows, plan, n_out, counter, tag))


class AllReduceSum(torch.autograd.Function):
    """Differentiable sum over a grid axis: forward all-reduces; backward all-reduces the gradient.

    Each rank's loss is its share of the global loss, so the gradient of a globally
    reduced quantity is the sum over ranks of the per-rank gradients. Called as
    ``AllReduceSum.apply(x, grid, axis)`` (``axis`` default ``"world"``).
    """

    @staticmethod
    def forward(ctx, x: Tensor, grid: ProcessGrid, axis: Axis | str = "world") -> Tensor:
        ctx.grid, ctx.axis = grid, axis
        return grid.all_reduce_(x.clone(), axis)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return ctx.grid.all_reduce_(grad.clone(), ctx.axis), None, None
