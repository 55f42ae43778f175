"""Modelled per-rank layer times, linear in a rank's rows, nonzeros, halo rows and peers.

The refinement's passes (:mod:`gnndist.partition.refine`) and the peer pruning
(:mod:`gnndist.partition.peers`) weigh moves by these times: :func:`unit_costs` reads the cost
model's per-unit seconds off :func:`gnndist.cost.rank_layer_times` once, and a move's effect is then
a few products. :func:`time_key` and :func:`compare` order two partitions: the modelled epoch, then the
ranks' own times from the slowest down (leximax).
"""

from __future__ import annotations

import numpy as np

from gnndist.cost import Network, RankLoad, rank_layer_times


def unit_costs(widths: tuple[int, ...], net: Network) -> np.ndarray:
    """Per layer, the modelled seconds a rank spends per owned row, per nonzero, per halo row and per peer,
    read off :func:`gnndist.cost.rank_layer_times` (linear in each); ``[layers, 5]`` with the fixed part last."""
    units = [RankLoad(rows=1), RankLoad(nnz=1), RankLoad(expand_send=1), RankLoad(messages=1), RankLoad()]
    out = []
    for i, (f_in, f_out) in enumerate(zip(widths[:-1], widths[1:])):
        t = rank_layer_times(units, f_in, f_out, net, first=(i == 0))
        out.append(np.append(t[:4] - t[4], t[4]))
    return np.array(out)


def times_of(unit: np.ndarray, rows, nnz, halo, msgs) -> np.ndarray:
    """Modelled seconds per layer of ranks with these owned rows, nonzeros, halo rows (max of sent and
    received) and peers (:func:`unit_costs`): ``[layers, *shape]`` for counts of any one ``shape``."""
    u = unit.reshape(unit.shape[:1] + (1,) * np.ndim(rows) + unit.shape[1:])
    return u[..., 4] + u[..., 0] * rows + u[..., 1] * nnz + u[..., 2] * halo + u[..., 3] * msgs


def load_times(loads: list[RankLoad], unit: np.ndarray) -> np.ndarray:
    """``[layers, P]`` modelled seconds of every rank in every layer (:func:`unit_costs`), from its loads."""
    a = np.array([[ld.rows, ld.nnz, max(ld.expand_send, ld.expand_recv), ld.messages] for ld in loads], dtype=float)
    return times_of(unit, *a.T)


def time_key(times: np.ndarray) -> tuple[float, np.ndarray]:
    """What the peer pruning lowers: the modelled layer time summed over layers (the epoch, less its constant
    all-reduce), then the ranks' own summed times from the slowest down (leximax)."""
    return float(times.max(axis=1).sum()), np.sort(times.sum(axis=0))[::-1]


def compare(new: tuple[float, np.ndarray], old: tuple[float, np.ndarray]) -> int:
    """-1 when ``new`` is better (:func:`time_key`, to a relative 1e-12), 0 when equal, 1 when worse."""
    eps = 1e-12 * max(old[0], 1e-300)
    if abs(new[0] - old[0]) > eps:
        return -1 if new[0] < old[0] else 1
    diff = new[1] - old[1]
    first = np.flatnonzero(np.abs(diff) > eps)
    return 0 if not len(first) else (-1 if diff[first[0]] < 0 else 1)


def better(new: tuple[float, np.ndarray], old: tuple[float, np.ndarray]) -> bool:
    return compare(new, old) < 0
