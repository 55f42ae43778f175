"""Where an epoch's time goes: aggregation, dense compute, communication wait, other.

One :class:`PhaseTimer` per rank, injected like the byte counter (``graph.context.timer``;
``counter.timer`` for the exchanges). Phases nest and each second is charged to
the innermost open phase only (exclusive time): the halo wait inside an SpMM counts as
``comm``, not as ``aggregation``; the SpMMs inside the forward pass are not ``dense``.
The clock is ``time.perf_counter``; with ``sync`` set (``grid.synchronize``, CUDA under
``--profile``) the device is synchronised before every reading, so queued kernels are
charged to the phase that launched them. Without ``sync`` on CUDA the split shows launch
times only, and the summary says so. Cost on CPU: two clock reads per phase.

Backward passes run inside autograd, so :func:`bracket` marks both ends of a forward
region: in backward, a gradient hook on its output opens the phase and an identity
autograd function on its input closes it, so the region's backward (kernels, exchanges)
is timed as well, with nothing added to the kernels.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from gnndist.machine import rss_peak

PARTS = ("aggregation", "dense", "comm", "other")  # the breakdown, in this order


class PhaseTimer:
    """Exclusive seconds per phase since :meth:`reset`.

    Args:
        sync: called before every clock reading (``grid.synchronize``); ``None``: no synchronisation.
    """

    def __init__(self, sync: Callable[[], None] | None = None):
        self.sync = sync
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []  # [name, start, seconds of inner phases, depth]

    def _now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def push(self, name: str) -> None:
        """Open phase ``name``; re-opening the innermost phase only deepens it."""
        if self._stack and self._stack[-1][0] == name:
            self._stack[-1][3] += 1
            return
        self._stack.append([name, self._now(), 0.0, 1])

    def pop(self, name: str) -> None:
        """Close phase ``name`` (the innermost one; a mismatched close is ignored)."""
        if not self._stack or self._stack[-1][0] != name:
            return
        top = self._stack[-1]
        top[3] -= 1
        if top[3]:
            return
        self._stack.pop()
        elapsed = self._now() - top[1]
        self.seconds[name] += elapsed - top[2]
        if self._stack:
            self._stack[-1][2] += elapsed

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.push(name)
        try:
            yield
        finally:
            self.pop(name)

    def reset(self) -> None:
        self.seconds.clear()
        self._stack.clear()

    def breakdown(self) -> dict[str, float]:
        """``{part}_s`` for every part of :data:`PARTS` (0 when not seen)."""
        return {f"{p}_s": float(self.seconds.get(p, 0.0)) for p in PARTS}


@contextmanager
def phase(timer: PhaseTimer | None, name: str) -> Iterator[None]:
    """``timer.phase(name)``, or nothing when there is no timer."""
    if timer is None:
        yield
        return
    with timer.phase(name):
        yield


class _Close(torch.autograd.Function):
    """Identity at a region's input: its backward runs last and closes the phase."""

    @staticmethod
    def forward(ctx, x: Tensor, timer: PhaseTimer, name: str) -> Tensor:
        ctx.timer, ctx.name = timer, name
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        ctx.timer.pop(ctx.name)
        return grad, None, None


def bracket(timer: PhaseTimer | None, name: str, fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """``fn(x)`` timed as phase ``name``, forward and (when ``x`` requires grad) backward.

    Shapes:
        x ``[n, *]`` -> whatever ``fn`` returns
    """
    if timer is None:
        return fn(x)
    grad = torch.is_grad_enabled() and x.requires_grad
    if grad:
        x = _Close.apply(x, timer, name)
    with timer.phase(name):
        out = fn(x)
    if grad and out.requires_grad:  # a hook, not a Function: the caller may modify ``out`` in place
        out.register_hook(lambda g: timer.push(name))  # runs before the region's backward
    return out


def peak_memory_bytes(device: torch.device) -> int:
    """This process's peak memory: allocated bytes on CUDA, else the resident-set high-water mark (VmHWM)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return rss_peak()
