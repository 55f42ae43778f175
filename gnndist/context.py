"""What changes from step to step of a run, kept apart from the rank's (read-only) graph.

A :class:`RunContext` belongs to one run on one rank. It holds the byte counter every
exchange reports to and the phase timer (both injected into the strategy when the graph is
built), and the state of the step in progress: its seed and epoch (the keys of every
dropout mask), whether a block is being recomputed, the SpMMs called so far (layer
widths, for the predicted bytes) and the tensors autograd rebuilds instead of keeping. The
trainer opens a step around each optimisation step::

    with graph.context.step(seed=cfg.run.seed, epoch=epoch):
        loss = loss_fn(model(graph, graph.x))
        loss.backward()

so nothing of a step is ever assigned to the graph.

Rebuilt, not kept: a tensor registered with :meth:`RunContext.rebuildable` (a dropout's output:
its mask is a hash of ids, so it can be made again bit for bit from its input) that a later op
saves for its backward (the next layer's matmul saves its input for the weight gradient) is
saved as the recipe, and made again when the backward needs it. The input dropout of a
``[n, F]`` feature matrix then holds nothing between the forward and the backward, where it
held ``5 F`` bytes per row (the dropped copy and its mask); hooks are on only inside a step.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from gnndist.dist.comm import ByteCounter
from gnndist.dist.timing import PhaseTimer

log = logging.getLogger("gnndist")


@dataclass(frozen=True)
class Step:
    """The keys of a step's randomness: dropout masks hash (seed, epoch, layer key, node id)."""

    seed: int = 0
    epoch: int = 0


@dataclass
class SpmmCall:
    """One layer's SpMMs since the step began: its width, how many, and how many had no backward."""

    width: int
    count: int = 0
    forward_only: int = 0
    itemsize: int = 4  # bytes per element of the rows it aggregated (2 under --precision bf16|fp16)


class _Rebuild:
    """What autograd saves in place of a rebuildable tensor: the function that makes it again."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[], Tensor]):
        self.build = build


def _same(t: Tensor, o: Tensor, version: int) -> bool:
    """Whether ``t`` (a tensor autograd saves) is ``o``, unmodified: the same memory, shape, strides and dtype."""
    return (t.data_ptr() == o.data_ptr() and t.shape == o.shape and t.stride() == o.stride()
            and t.dtype == o.dtype and t.device == o.device and t._version == version)


class RunContext:
    """The byte counter, the phase timer and the step in progress of one run on one rank.

    Args:
        is_main: whether this rank logs (rank 0).
    """

    def __init__(self, is_main: bool = True):
        self.timer = PhaseTimer()  # the step's time per phase; the exchanges report their waits to it
        self.counter = ByteCounter(timer=self.timer)
        self.current = Step()
        self.calls: dict[str, SpmmCall] = {}  # tag -> the layer's SpMMs in this step
        self.recomputing = False  # a checkpointed block is being recomputed: its SpMMs have no backward
        self.statistics_frozen = False  # a forward is repeated: batch norm leaves its running statistics alone
        self._is_main = is_main
        self._said: set[str] = set()
        # this step's rebuildable tensors: key -> (weak reference, version, build); an entry leaves when its tensor
        # dies, so a build (which holds the tensor's input) lives on only in the saved slots that took it
        self._rebuildable: dict[int, tuple[weakref.ref, int, Callable[[], Tensor]]] = {}
        self._keys = itertools.count()

    @contextmanager
    def step(self, seed: int = 0, epoch: int = 0) -> Iterator[Step]:
        """One step: bytes, SpMM calls and phase times start from zero; dropout masks use (``seed``, ``epoch``)."""
        self.counter.reset()
        self.timer.reset()
        self.calls = {tag: SpmmCall(c.width) for tag, c in self.calls.items()}
        prev, self.current = self.current, Step(seed, epoch)
        self._rebuildable = {}
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield self.current
        finally:
            self.current = prev
            self._rebuildable = {}

    def rebuildable(self, out: Tensor, build: Callable[[], Tensor]) -> Tensor:
        """Let autograd save ``out`` as ``build`` (no arguments, returns ``out`` again bit for bit) for this step.

        Only inside a step and where grad is on; ``out`` is returned. ``build`` must not hold ``out``.
        """
        if torch.is_grad_enabled():
            key, entries = next(self._keys), self._rebuildable
            entries[key] = (weakref.ref(out, lambda _: entries.pop(key, None)), out._version, build)
        return out

    def _pack(self, t: Tensor):
        for ref, version, build in list(self._rebuildable.values()):
            o = ref()
            if o is not None and _same(t, o, version):
                return _Rebuild(build)
        return t

    @staticmethod
    def _unpack(saved):
        if isinstance(saved, _Rebuild):
            with torch.no_grad():
                return saved.build()
        return saved

    @contextmanager
    def recompute(self) -> Iterator[None]:
        """A repeated forward of a checkpointed block: its SpMMs count as forward-only, statistics stay."""
        prev = self.recomputing, self.statistics_frozen
        self.recomputing = self.statistics_frozen = True
        try:
            yield
        finally:
            self.recomputing, self.statistics_frozen = prev

    @contextmanager
    def frozen_statistics(self) -> Iterator[None]:
        """Inside, batch norm normalises as usual but does not update its running statistics (a repeated forward)."""
        prev, self.statistics_frozen = self.statistics_frozen, True
        try:
            yield
        finally:
            self.statistics_frozen = prev

    def record_spmm(self, tag: str, width: int, backward: bool, itemsize: int = 4) -> None:
        """Count one SpMM of layer ``tag`` at ``width`` on rows of ``itemsize`` bytes per element; ``backward``:
        its exchange runs backward as well."""
        call = self.calls.setdefault(tag, SpmmCall(width))
        call.width, call.itemsize = width, itemsize
        call.count += 1
        call.forward_only += 0 if backward and not self.recomputing else 1

    def say_once(self, key: str, msg: str) -> None:
        """Log ``msg`` once per run (rank 0)."""
        if key not in self._said:
            self._said.add(key)
            if self._is_main:
                log.info(msg)
