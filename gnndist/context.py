"""What changes from step to step of a run, kept apart from the rank's (read-only) graph.

A :class:`RunContext` belongs to one run on one rank. It holds the byte counter every
exchange reports to and the phase timer (both injected into the strategy when the graph is
built), and the state of the step in progress: its seed and epoch (the keys of every
dropout mask), whether a block is being recomputed, and the SpMMs called so far (layer
widths, for the predicted bytes). The trainer opens a step around each optimisation step::

    with graph.context.step(seed=cfg.run.seed, epoch=epoch):
        loss = loss_fn(model(graph, graph.x))

so nothing of a step is ever assigned to the graph.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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

    @contextmanager
    def step(self, seed: int = 0, epoch: int = 0) -> Iterator[Step]:
        """One step: bytes, SpMM calls and phase times start from zero; dropout masks use (``seed``, ``epoch``)."""
        self.counter.reset()
        self.timer.reset()
        self.calls = {tag: SpmmCall(c.width) for tag, c in self.calls.items()}
        prev, self.current = self.current, Step(seed, epoch)
        try:
            yield self.current
        finally:
            self.current = prev

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
