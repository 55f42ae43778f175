"""Peer pruning: the few nodes that tie two parts together move to a third part, so the pair stops exchanging.

Per exchange a rank pays a latency per peer, and at large P with narrow layers the peers, not the
rows, set its time (``docs/partitioning.md``). :func:`prune_peers` runs after the refinement's volume
passes (:mod:`gnndist.partition.refine`) on a :class:`Ledger`: exact bookkeeping of single-node moves.
"""

from __future__ import annotations

import numpy as np
from gnndist.partition.book import GlobalCSR
from gnndist.partition.counts import as_counts
from gnndist.partition.rank_times import better, time_key, times_of

VOLUME_GROWTH = 1.1  # peer pruning may raise the total volume by at most this factor


class Ledger:
    """Exact incremental bookkeeping of a partition for moves of single nodes: the neighbour counts
    ``cnt`` (:mod:`~gnndist.partition.counts`, dense or sparse), the rows every part sends every other
    ``pair [P, P]``, owned rows, nonzeros and balance weights per part. A move and its reverse restore every
    count exactly."""

    def __init__(self, csr: GlobalCSR, assign: np.ndarray, cnt, weights: np.ndarray):
        cnt = as_counts(cnt)
        parts = cnt.parts
        self.csr, self.assign, self.cnt, self.weights = csr, assign, cnt, weights
        self.degree = csr.degree()
        self.pair = cnt.send_pairs(assign)
        self.rows = np.bincount(assign, minlength=parts).astype(np.int64)
        self.nnz = np.bincount(assign, weights=self.degree, minlength=parts).astype(np.int64)
        self.wpart = np.stack([np.bincount(assign, weights=w, minlength=parts) for w in weights.T],
                              axis=1).astype(np.int64)  # [P, ncon]

    def move(self, v: int, t: int) -> None:
        """Move node ``v`` to part ``t``."""
        a = int(self.assign[v])
        if a == t:
            return
        cnt, pair = self.cnt, self.pair
        # v's own row: part a stops sending it, part t starts, each to the parts holding v's neighbours
        nz = np.flatnonzero(cnt.row(v))
        pair[a, nz[nz != a]] -= 1
        pair[t, nz[nz != t]] += 1
        # each neighbour u (in part c): a may stop needing u, t may start
        nb = self.csr.col[self.csr.rowptr[v] : self.csr.rowptr[v + 1]]
        pn = self.assign[nb]
        lost = (cnt.get(nb, a) == 1) & (pn != a)
        gain = (cnt.get(nb, t) == 0) & (pn != t)
        np.add.at(pair[:, a], pn[lost], -1)
        np.add.at(pair[:, t], pn[gain], 1)
        cnt.add(nb, a, -1)
        cnt.add(nb, t, 1)
        self.rows[a] -= 1
        self.rows[t] += 1
        self.nnz[a] -= self.degree[v]
        self.nnz[t] += self.degree[v]
        self.wpart[a] -= self.weights[v]
        self.wpart[t] += self.weights[v]
        self.assign[v] = t

    def peers(self) -> np.ndarray:
        """``[P, P]`` bool: the parts every part exchanges rows with (the graph is symmetric)."""
        return (self.pair > 0) | (self.pair.T > 0)

    def layer_times(self, unit: np.ndarray) -> np.ndarray:
        """``[layers, P]`` modelled seconds of every rank in every layer
        (:func:`~gnndist.partition.rank_times.unit_costs`)."""
        vol = np.maximum(self.pair.sum(1), self.pair.sum(0))
        msgs = np.maximum(np.count_nonzero(self.pair, axis=1), np.count_nonzero(self.pair, axis=0))
        return times_of(unit, self.rows, self.nnz, vol, msgs)

    def max_volume(self) -> int:
        return int(max(self.pair.sum(1).max(), self.pair.sum(0).max()))


def prune_peers(book: Ledger, unit: np.ndarray, cap: np.ndarray, max_group: int = 32,
                max_tries: int = 1024) -> dict:
    """Drop peers of the slowest ranks by moving the few nodes that tie two parts together.

    Per exchange a rank pays ``alpha`` per peer, and at large P with narrow layers the peers, not
    the rows, set a rank's time (``docs/partitioning.md``). Two parts ``a`` and ``c`` are peers
    while one edge joins them; when only a few nodes of ``a`` (or of ``c``) have neighbours on the
    other side, moving those nodes to a third part that already exchanges with the parts of their
    neighbours removes the pair and adds none. Ranks are visited slowest first, their weakest
    pairs first (fewest such nodes, at most ``max_group``); a group of moves is kept when it lowers
    the modelled epoch time, or keeps it and lowers the ranks' times leximax (slowest first), keeps
    every balance weight under ``cap`` and does not raise the maximum per-rank volume; otherwise
    it is undone exactly.

    Returns statistics: ``groups`` kept, nodes ``moved``, ``tries``, max peers before and after.
    """
    times = book.layer_times(unit)
    stats = {"groups": 0, "moved": 0, "tries": 0, "max_peers_before": int(book.peers().sum(1).max())}
    bounds = (book.max_volume(), int(VOLUME_GROWTH * book.pair.sum()))  # the max volume, the total's cap
    done: set = set()  # (part, peer, side) tries that failed since their parts last changed
    fresh = True  # done was just emptied: a sweep without a kept group then ends the pruning
    while stats["tries"] < max_tries:
        kept = _sweep(book, unit, cap, times, bounds, done, stats, max_group, max_tries)
        if kept is None and fresh:
            break
        if kept is None:  # tries remembered as failed may pass now that other parts changed: all once more
            done.clear()
        else:
            times = kept
        fresh = kept is None
    stats["max_peers_after"] = int(book.peers().sum(1).max())
    return stats


def _sweep(book: Ledger, unit: np.ndarray, cap: np.ndarray, times: np.ndarray, bounds: tuple[int, int], done: set,
           stats: dict, max_group: int, max_tries: int) -> np.ndarray | None:
    """Try the weakest pairs of the slowest ranks until one group is kept (:func:`_try_group`): the layer
    times after it, or None. Counts the tries in ``stats``; a failed try goes to ``done``."""
    parts = book.pair.shape[0]
    key = time_key(times)
    order = np.argsort(-times.sum(axis=0), kind="stable")
    for a in order[: max(4, parts // 4)]:
        for _, c, side, other in _weak_pairs(book, int(a), done, max_group):
            if stats["tries"] >= max_tries:
                break
            stats["tries"] += 1
            kept = _try_group(book, unit, cap, key, bounds, side, other)
            if kept is not None:
                new_times, moved = kept
                touched = set(np.flatnonzero((new_times != times).any(axis=0)).tolist())
                done.difference_update({d for d in done if touched.intersection(d)})  # their parts changed: again
                stats["groups"] += 1
                stats["moved"] += moved
                return new_times
            done.add((int(a), c, side))
    return None


def _weak_pairs(book: Ledger, a: int, done: set, max_group: int) -> list[tuple[int, int, int, int]]:
    """Part ``a``'s pairs to try, weakest first: ``(size, peer, side, other)`` where ``size`` nodes of part
    ``side`` (at most ``max_group``) have neighbours in ``other``, one per peer and side not in ``done``."""
    peers = book.peers()
    cands = []
    for c in np.flatnonzero(peers[a]):
        for side, other in ((a, c), (c, a)):
            size = int(book.pair[side, other])
            if 0 < size <= max_group and (a, c, side) not in done:
                cands.append((size, int(c), int(side), int(other)))
    return sorted(cands)


def _try_group(book: Ledger, unit: np.ndarray, cap: np.ndarray, key: tuple, bounds: tuple[int, int], side: int,
               other: int) -> tuple[np.ndarray, int] | None:
    """Move every node of part ``side`` with a neighbour in ``other`` to its :func:`_target`. Kept (the layer
    times after it and the nodes moved) when all moved, every weight stays under ``cap``, the volumes within
    ``bounds`` and the modelled times fall (:func:`~gnndist.partition.rank_times.better`); else undone exactly."""
    nodes = book.cnt.in_part(other)
    nodes = nodes[book.assign[nodes] == side]
    moves = []
    for v in nodes:
        t = _target(book, int(v), side, other)
        if t is None:
            break
        book.move(int(v), t)
        moves.append(int(v))
        if (book.wpart[t] > cap[t]).any():  # a target only gains weight in a group: it fails
            break
    new_times = book.layer_times(unit)
    max_volume, total_cap = bounds
    if (len(moves) == len(nodes) and (book.wpart <= cap).all() and book.max_volume() <= max_volume
            and book.pair.sum() <= total_cap and better(time_key(new_times), key)):
        return new_times, len(moves)
    for v in reversed(moves):
        book.move(v, side)
    return None


def _target(book: Ledger, v: int, side: int, other: int) -> int | None:
    """Where node ``v`` of part ``side`` goes so that it no longer ties ``side`` to ``other``: a third part
    (or ``other`` itself when ``v`` has no neighbour left in ``side``), the one adding fewest new peers,
    then holding most of ``v``'s neighbours; None when there is no such part."""
    parts = book.pair.shape[0]
    cv = book.cnt.row(v)
    allowed = np.ones(parts, dtype=bool)
    allowed[side] = False
    if cv[side] > 0:
        allowed[other] = False
    if not allowed.any():
        return None
    peers = book.peers()
    needs = cv > 0  # parts v exchanges with, wherever it goes
    new_peers = (needs[None, :] & ~peers & ~np.eye(parts, dtype=bool)).sum(1)  # [P] if v moved to each part
    score = new_peers.astype(np.int64) * (1 << 40) - cv  # fewest new peers, then most neighbours
    score[~allowed] = np.iinfo(np.int64).max
    t = int(np.argmin(score))
    return t if allowed[t] and new_peers[t] == 0 else None
