"""Distributed aggregation strategies: one class per strategy behind one interface, chosen by name.

A strategy computes ``graph.spmm``: the aggregation of every owned row's neighbourhood,
with whatever communication it needs, taking and returning the 1D row layout. Every
strategy is exact against one process.

    1d     Halo1D   halo exchange of exactly the rows each rank needs (every layer)
    1.5d   Grid15D  q x c grid, replication c: expand along columns, fold along rows
    2d     Grid2D   the square grid (c = sqrt(P))
    auto   Auto     per layer, the least modelled time (gnndist.cost)
"""

from __future__ import annotations

from gnndist.errors import UserError
from gnndist.strategies.auto import Auto
from gnndist.strategies.base import Block, BlockStrategy, Strategy
from gnndist.strategies.grid_spmm import Grid2D, Grid15D
from gnndist.strategies.halo1d import Halo1D
from gnndist.strategies.structure import Structure

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (Halo1D, Grid15D, Grid2D, Auto)}


def strategy_from_config(dist) -> Strategy:
    """The (unbuilt) strategy of ``--strategy`` with the options of ``dist`` (a :class:`~gnndist.config.DistConfig`,
    validated as the flags are) it uses: the one way a strategy is made from its name."""
    if dist.strategy not in STRATEGIES:
        raise UserError(f"unknown --strategy {dist.strategy!r}; available: {', '.join(sorted(STRATEGIES))}")
    return STRATEGIES[dist.strategy].from_config(dist)


__all__ = ["STRATEGIES", "Auto", "Block", "BlockStrategy", "Grid15D", "Grid2D", "Halo1D", "Strategy", "Structure",
           "strategy_from_config"]
