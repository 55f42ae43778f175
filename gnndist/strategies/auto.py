"""``auto``: per layer, the layout the cost model predicts fastest for that layer's width."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from gnndist.cost import Network, RankLoad, layout_time, network
from gnndist.partition.layouts import replications
from gnndist.probe import probe
from gnndist.strategies.base import BlockStrategy, Strategy
from gnndist.strategies.grid_spmm import Grid2D, Grid15D
from gnndist.strategies.halo1d import Halo1D

log = logging.getLogger("gnndist")


def candidates(world: int, overlap: bool = True) -> list[BlockStrategy]:
    """``1d``, ``1.5d`` / ``2d`` for every replication of :func:`gnndist.partition.replications`."""
    return [Halo1D(overlap) if c == 1 else Grid2D(overlap) if c * c == world else Grid15D(c, overlap)
            for c in replications(world)]


class Auto(Strategy):
    """Gives each layer (``tag``) the candidate layout with the least modelled time for its width.

    The counts of every rank come from the partition (``META.json`` ``layouts``, written by
    ``gnndist partition``), so only the chosen layouts are built, on first use; a partition
    directory without them (older ones) gets every candidate built and the counts gathered.
    All ranks see the same counts and choose alike; each choice is logged once per layer
    with the predicted bytes and time of every candidate.

    Args:
        network: machine constants (:mod:`gnndist.cost`); ``None`` measures them (:func:`~gnndist.probe.probe`).
        overrides: ``alpha`` / ``beta`` values that replace the probe's (``--alpha``, ``--beta``).
        overlap: passed to every candidate.
    """

    name = "auto"

    def __init__(self, network: Network | None = None, overrides: dict | None = None, overlap: bool = True):
        self.overlap = overlap
        self.network = network
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.options: list[BlockStrategy] = []
        self.loads: list[list[RankLoad]] = []
        self.chosen: dict[str, BlockStrategy] = {}
        self.report: dict[str, dict] = {}

    @classmethod
    def from_config(cls, dist) -> Auto:
        net = None if dist.network == "probe" else network(dist.network, dist.alpha, dist.beta)
        return cls(net, {"alpha": dist.alpha, "beta": dist.beta}, dist.overlap)

    def build(self, part, grid, counter, kernel=None, wire: torch.dtype | None = None) -> None:
        self._args = (part, grid, counter, kernel, wire)
        self.is_main = grid.is_main
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
        if self.network is None:
            self.network = replace(probe(grid, part.csr, kernel=kernel), **self.overrides)

    def choose(self, tag: str, width: int) -> BlockStrategy:
        """The layout of layer ``tag`` (decided on its first call, from its width)."""
        if tag not in self.chosen:
            times = [layout_time(ld, width, self.network, self.elem) for ld in self.loads]
            best = int(np.argmin(times))
            if not self.options[best].built:
                self.options[best].build(*self._args)  # collective: every rank chose the same
            self.chosen[tag] = self.options[best]
            per = {}
            for s, ld, t in zip(self.options, self.loads, times):
                b = [x.bytes(width, self.elem) for x in ld]
                per[s.describe()] = {"model_time_s": t, "max_bytes_per_rank": max(max(v["fwd_sent"] + v["bwd_sent"],
                                     v["fwd_received"] + v["bwd_received"]) for v in b)}
            self.report[tag] = {"strategy": self.options[best].name, "replication": self.options[best].replication,
                                "width": width, "candidates": per}
            if self.is_main:
                alts = ", ".join(f"{k} {v['max_bytes_per_rank']:,} B/rank {v['model_time_s'] * 1e3:.3f} ms"
                                 for k, v in per.items())
                log.info("auto: %s (F=%d) -> %s  [%s; network %s]", tag, width, self.options[best].describe(),
                         alts, self.network.name)
        return self.chosen[tag]

    def after_first_step(self) -> None:
        """Drop the candidate layouts no layer chose (their blocks and plans), once every layer has run."""
        keep = [k for k, s in enumerate(self.options) if any(s is c for c in self.chosen.values())]
        self.options = [self.options[k] for k in keep]
        self.loads = [self.loads[k] for k in keep]

    def spmm(self, x: Tensor, tag: str) -> Tensor:
        return self.choose(tag, x.shape[1]).spmm(x, tag)

    def layout_for(self, tag: str) -> BlockStrategy:
        if tag not in self.chosen:
            raise KeyError(f"auto has not chosen a layout for layer {tag!r} yet (it chooses on the layer's first SpMM)")
        return self.chosen[tag]

    def choices(self) -> dict[str, dict]:
        return self.report
