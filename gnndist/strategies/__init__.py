"""Distributed aggregation strategies: one class per strategy behind one interface, chosen by name.

A strategy computes ``graph.spmm``: the aggregation of every owned row's neighbourhood,
with whatever communication it needs. Every strategy is exact against one process.
"""

from __future__ import annotations

from gnndist.errors import UserError
from gnndist.strategies.base import Strategy
from gnndist.strategies.halo1d import Halo1D

STRATEGIES: dict[str, type[Strategy]] = {Halo1D.name: Halo1D}


def get_strategy(name: str, **kw) -> Strategy:
    """The strategy registered under ``name`` (``--strategy``)."""
    if name not in STRATEGIES:
        raise UserError(f"unknown --strategy {name!r}; available: {', '.join(sorted(STRATEGIES))}")
    return STRATEGIES[name](**kw)


__all__ = ["STRATEGIES", "Strategy", "get_strategy"]
