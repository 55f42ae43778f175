"""``auto``: per layer, the layout the cost model predicts fastest for that layer's width.

Where other candidates are within :data:`TIMING_BAND` of the least modelled one (wider than the
model's worst error on measured epochs, :data:`gnndist.cost.MODEL_ERROR_WORST`), the model cannot
tell them apart: each of those is timed over a few SpMMs forward and backward at the layer's width
(the slowest rank's time) and the fastest kept (:func:`settle`). The decision is kept with the
probe's constants (per machine, partition and width), so the same partition on the same machine
gets the same layouts run after run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gnndist.cost import Network, RankLoad, layout_time, network, on_hosts
from gnndist.dist.comm import ByteCounter
from gnndist.dist.grid import ProcessGrid
from gnndist.dist.probe import cache_key, default_cache, probed, read_decision, with_overrides, write_decision
from gnndist.partition.layouts import replications
from gnndist.strategies.base import BlockStrategy, Strategy
from gnndist.strategies.grid_spmm import Grid2D, Grid15D
from gnndist.strategies.halo1d import Halo1D

log = logging.getLogger("gnndist")

TIMED_CALLS = 5  # timed SpMMs of each near candidate (the median decides)
# candidates modelled within this of the best are timed: the model's order is trusted only beyond its worst
# error on measured epochs (cost.MODEL_ERROR_WORST, 31 %; benchmarks/README.md, "Cost model")
TIMING_BAND = 0.38


def candidates(world: int, overlap: bool = True) -> list[BlockStrategy]:
    """``1d``, ``1.5d`` / ``2d`` for every replication of :func:`gnndist.partition.replications`."""
    return [Halo1D(overlap) if c == 1 else Grid2D(overlap, c) if c * c == world else Grid15D(c, overlap)
            for c in replications(world)]


def settle(modelled: list[float], error: float, measure: Callable[[int], float]) -> tuple[int, dict[int, float]]:
    """The candidate to keep: the least ``modelled`` one, unless others are within ``error`` of it
    (``t <= t_best * (1 + error)``); then ``measure(k)`` (seconds) of each of those decides.

    Returns the index kept and the measured seconds by index (empty when nothing was measured).
    """
    best = int(np.argmin(modelled))
    near = [k for k, t in enumerate(modelled) if t <= modelled[best] * (1.0 + error)]
    if len(near) < 2:
        return best, {}
    measured = {k: measure(k) for k in near}
    return min(near, key=lambda k: (measured[k], modelled[k], k)), measured


@dataclass(frozen=True)
class Decision:
    """A layer's layout: the index kept, every candidate's modelled seconds, the seconds measured (by index), and
    whether the measured ones come from an earlier run's decision (``remembered``)."""

    best: int
    modelled: list[float]
    measured: dict[int, float]
    remembered: bool = False


def decide(loads: list[list[RankLoad]], names: list[str], width: int, backward: bool, net: Network, elem: int,
           error: float, kept: dict | None, measure: Callable[[int], float]) -> Decision:
    """The layout of one layer, from every rank's counts of each candidate (``loads``), the layer's ``width`` and
    whether its SpMM runs backward: pure, given ``measure(k)`` (the timing of candidate ``k``, asked only for the
    candidates :func:`settle` cannot tell apart) and ``kept`` (an earlier run's decision, ``{"keep", "measured"}``
    by name; one naming no candidate is ignored)."""
    modelled = [layout_time(ld, width, net, elem) * (1.0 if backward else 0.5) for ld in loads]
    if kept is not None and kept["keep"] in names:
        measured = {names.index(n): t for n, t in kept["measured"].items() if n in names}
        return Decision(names.index(kept["keep"]), modelled, measured, remembered=True)
    best, measured = settle(modelled, error, measure)
    return Decision(best, modelled, measured)


def decision_report(decision: Decision, names: list[str], loads: list[list[RankLoad]], width: int, elem: int,
                    strategy: BlockStrategy, net: Network) -> dict:
    """What :meth:`Auto.choices` says of one layer: the layout kept and every candidate's modelled time, largest
    bytes per rank and measured time (where it was timed)."""
    per = {}
    for name, ld, t in zip(names, loads, decision.modelled):
        b = [x.bytes(width, elem) for x in ld]
        per[name] = {"model_time_s": t, "max_bytes_per_rank": max(max(v["fwd_sent"] + v["bwd_sent"],
                     v["fwd_received"] + v["bwd_received"]) for v in b)}
    for k, t in decision.measured.items():
        per[names[k]]["measured_time_s"] = t
    return {"strategy": strategy.name, "replication": strategy.replication, "width": width, "candidates": per,
            "network": net.as_dict(), "hosts": max((ld.hosts for lds in loads for ld in lds), default=1)}


def decision_line(tag: str, width: int, chosen: str, report: dict, decision: Decision, names: list[str],
                  error: float) -> str:
    """The line rank 0 logs for a layer's decision: every candidate's bytes and modelled time, and the timed ones."""
    per = report["candidates"]
    alts = ", ".join(f"{k} {v['max_bytes_per_rank']:,} B/rank {v['model_time_s'] * 1e3:.3f} ms" for k, v in per.items())
    timed = ""
    if decision.measured:  # said once, on the layer's line
        how = "as timed in an earlier run" if decision.remembered else f"the median of {TIMED_CALLS} SpMMs each"
        timed = (f"; {' and '.join(names[k] for k in decision.measured)} within the timing band "
                 f"({100 * error:.0f} %), {how}: "
                 + ", ".join(f"{names[k]} {t * 1e3:.3f} ms" for k, t in decision.measured.items()))
    net = report["network"]
    levels = (f" (two levels: {net['beta'] / 1e6:,.1f} MB/s a rank within its host, {net['beta_host'] / 1e6:,.1f} "
              f"MB/s a host's link)" if report.get("hosts", 1) > 1 and net.get("beta_host") else "")
    return f"auto: {tag} (F={width}) -> {chosen}  [{alts}; network {net['name']}{levels}{timed}]"


class Auto(Strategy):
    """Gives each layer (``tag``) the candidate layout with the least modelled time for its width.

    The counts of every rank come from the partition (``META.json`` ``layouts``, written by
    ``gnndist partition``), so only the chosen layouts are built, on first use; a partition
    directory without them (older ones) gets every candidate built and the counts gathered.
    On several hosts the counts are split into rows within a host and rows between hosts (each
    part's ``layout_pairs``), which the two-level model times at ``beta`` and ``beta_host``.
    All ranks see the same counts and choose alike; each choice is logged once per layer
    with the predicted bytes and time of every candidate.

    Args:
        network: machine constants (:mod:`gnndist.cost`); ``None`` measures them
            (:func:`~gnndist.dist.probe.probed`: reused from ``cache`` when it holds this machine's).
        overrides: ``alpha`` / ``beta`` values that replace the probe's (``--alpha``, ``--beta``).
        overlap: passed to every candidate.
        cache: the probe's file (``--probe-cache``); ``None``: measure, keep nothing.
        reprobe: measure the constants and near decisions again (``--reprobe``).
        error: relative band within which modelled candidates are timed instead (:func:`settle`).
        clock: seconds, for the timing of near candidates (``time.perf_counter``).
    """

    name = "auto"

    def __init__(self, network: Network | None = None, overrides: dict | None = None, overlap: bool = True,
                 cache: Path | None = None, reprobe: bool = False, error: float = TIMING_BAND,
                 clock: Callable[[], float] = time.perf_counter):
        self.overlap = overlap
        self.network = network
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.cache, self.reprobe, self.error, self.clock = cache, reprobe, error, clock
        self.options: list[BlockStrategy] = []
        self.loads: list[list[RankLoad]] = []
        self.chosen: dict[str, BlockStrategy] = {}
        self.decisions: dict[str, dict] = {}  # per layer, what choices() says (decision_report)
        # set by build: what a candidate's own build takes, the grid, and the bytes per element sent
        self._args: tuple | None = None
        self.grid: ProcessGrid | None = None
        self.elem = 4

    @classmethod
    def from_config(cls, dist) -> Auto:
        net = None if dist.network == "probe" else network(dist.network, dist.alpha, dist.beta)
        cache = Path(dist.probe_cache) if dist.probe_cache else default_cache()
        return cls(net, {"alpha": dist.alpha, "beta": dist.beta}, dist.overlap, cache, dist.reprobe)

    def build(self, part, grid, counter, kernel=None, wire: torch.dtype | None = None) -> None:
        self._args = (part, grid, counter, kernel, wire)
        self.elem = wire.itemsize if wire is not None else 4  # bytes per element sent
        self.options = candidates(grid.world_size, self.overlap)
        shapes = [str(s.grid_shape(grid.world_size)) for s in self.options]  # each candidate's replication
        stored = part.layouts
        if all(c in stored for c in shapes):
            self.loads = [[RankLoad.from_array(a) for a in stored[c]] for c in shapes]
        else:  # a partition without stored layouts: build every candidate, gather the counts
            for s in self.options:
                s.build(*self._args)
            mine = np.stack([s.load().as_array() for s in self.options])  # [candidates, 8]
            every = grid.all_gather_object(mine)  # P x [candidates, 8]
            self.loads = [[RankLoad.from_array(r[k]) for r in every] for k in range(len(self.options))]
        self.grid = grid
        if grid.num_hosts > 1:
            self.loads = self._on_hosts(part, shapes)
        if self.network is None:
            say = log.info if grid.is_main else None
            self.network = with_overrides(probed(grid, self.cache, self.reprobe, part.csr, kernel, say),
                                          **self.overrides)
        # every input of a decision is one value for the job: the counts (each rank read them from its META.json)
        # and the constants (flags each rank parsed, or the probe's); a rank that differs is named
        self.loads = grid.agree(self.loads, "layout counts (META.json layouts)")
        self.network = grid.agree(self.network, "cost-model constants (--network, --alpha, --beta, the probe)")

    def _on_hosts(self, part, shapes: list[str]) -> list[list[RankLoad]]:
        """Every candidate's loads split by host (:func:`gnndist.cost.on_hosts`: the rows each exchange moves within
        a host and between hosts), from every rank's row of each layout's exchanges: the partition's
        ``layout_pairs``, or the built candidates' plans for a partition made before it stored them (collective)."""
        keys, stored = list(part.layouts), part.layout_pairs
        if stored is not None and all(c in keys for c in shapes):
            mine = np.stack([stored[keys.index(c)] for c in shapes])  # [candidates, 2, P]
        else:
            mine = np.stack([self._built(k).pairs(self.grid.world_size) for k in range(len(self.options))])
        every = np.stack(self.grid.all_gather_object(mine))  # [P, candidates, 2, P]
        return [on_hosts(lds, every[:, k, 0], every[:, k, 1], self.grid.hosts) for k, lds in enumerate(self.loads)]

    def decision_key(self, width: int, backward: bool) -> str:
        """Where a timed decision is kept: the machine, the candidates' counts on every rank, the width."""
        counts = [[ld.as_array().tolist() for ld in lds] for lds in self.loads]
        digest = hashlib.sha256(json.dumps([[s.describe() for s in self.options], counts]).encode()).hexdigest()[:16]
        return f"{cache_key(self.grid.hosts, self.grid.device)}|layouts {digest}|F={width}|bwd={int(backward)}"

    def _measure(self, k: int, width: int, backward: bool) -> float:
        """Seconds of one SpMM of candidate ``k`` at ``width`` (forward, and backward when the layer's has one):
        the median over :data:`TIMED_CALLS` calls after an untimed one of the slowest rank's time (collective);
        its bytes go to a scratch counter."""
        s, grid = self._built(k), self.grid
        own, s.counter = s.counter, ByteCounter()
        try:
            x = torch.ones(s.block.n_owned, width, device=grid.device, requires_grad=backward)
            seconds = []
            for _ in range(1 + TIMED_CALLS):
                grid.barrier()
                t0 = self.clock()
                with torch.enable_grad():
                    y = s.spmm(x, "auto-timing")
                    if backward:
                        y.sum().backward()
                grid.synchronize()
                seconds.append(self.clock() - t0)
        finally:
            s.counter = own
        t = torch.tensor(seconds[1:], dtype=torch.float64, device=grid.device)
        return float(grid.all_reduce_(t, op="max").median().item())

    def _kept(self, key: str | None) -> dict | None:
        """An earlier run's decision under ``key``, read by rank 0 and given to every rank (collective)."""
        return self.grid.share(read_decision(self.cache, key) if key and not self.reprobe and self.grid.is_main
                               else None)  # rank 0's file decides for every rank

    def _built(self, k: int) -> BlockStrategy:
        """Candidate ``k``, built on first use (collective: every rank asks for the same candidates)."""
        if not self.options[k].built:
            self.options[k].build(*self._args)
        return self.options[k]

    def choose(self, tag: str, width: int, backward: bool = True) -> BlockStrategy:
        """The layout of layer ``tag`` (decided on its first call, from its width and whether its SpMM runs backward):
        :func:`decide`, with the collective timing of :meth:`_measure` and an earlier run's decision; then the
        report (:meth:`choices`) and rank 0's line."""
        if tag not in self.chosen:
            names = [s.describe() for s in self.options]
            key = self.decision_key(width, backward) if self.cache is not None else None
            d = decide(self.loads, names, width, backward, self.network, self.elem, self.error, self._kept(key),
                       lambda k: self._measure(k, width, backward))
            # the same inputs give the same decision on every rank; should one still differ, rank 0's is the job's
            # (a layout some ranks build while others multiply with another never finishes)
            d = self.grid.agree(d, f"auto decision for {tag} (F={width})")
            if d.measured and not d.remembered and key and self.grid.is_main:
                write_decision(self.cache, key, names[d.best], {names[k]: t for k, t in d.measured.items()})
            self.chosen[tag] = self._built(d.best)  # every rank has the same decision
            self.decisions[tag] = decision_report(d, names, self.loads, width, self.elem, self.chosen[tag],
                                                  self.network)
            if self.grid.is_main:
                log.info(decision_line(tag, width, self.chosen[tag].describe(), self.decisions[tag], d, names,
                                       self.error))
        return self.chosen[tag]

    def after_first_step(self) -> None:
        """Drop the candidate layouts no layer chose (their blocks and plans), once every layer has run."""
        keep = [k for k, s in enumerate(self.options) if any(s is c for c in self.chosen.values())]
        self.options = [self.options[k] for k in keep]
        self.loads = [self.loads[k] for k in keep]

    def spmm(self, x: Tensor, tag: str) -> Tensor:
        return self.choose(tag, x.shape[1], torch.is_grad_enabled() and x.requires_grad).spmm(x, tag)

    def layout_for(self, tag: str) -> BlockStrategy:
        if tag not in self.chosen:
            raise KeyError(f"auto has not chosen a layout for layer {tag!r} yet (it chooses on the layer's first SpMM)")
        return self.chosen[tag]

    def choices(self) -> dict[str, dict]:
        return self.decisions
