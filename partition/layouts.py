"""Per-rank communication of every SpMM layout, counted on a partition (no processes).

A layout with replication ``c`` (``c | P``; ``c = 1`` is 1D) puts entry ``(r, col)`` of ``A``
on rank ``blk = (owner(r) // c) * c + owner(col) % c``; rank blk receives input row ``col``
from ``owner(col)`` once when ``owner(col) != blk`` (the expand) and sends its partial row
``r`` to ``owner(r)`` once when ``owner(r) != blk`` (the fold). The runtime strategies
(:mod:`gnndist.strategies`) build exactly these exchanges; the tests check the bytes they
count against :func:`grid_loads`. The partition stores the loads of the layouts its part
count admits (:func:`layout_counts`: per-rank totals in ``META.json``, and each part's rows to and from every
other rank, ``layout_pairs``, so a job on several hosts can tell the rows that leave a host), so
``--strategy auto`` can choose without building them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from gnndist.partition.book import ENTRY_CHUNK, GlobalCSR, in_order, row_chunks, unique_ids

from gnndist.cost import RankLoad


def replications(parts: int, max_replication: int = 16) -> list[int]:
    """The replications ``auto`` considers on ``parts`` ranks: 1, every divisor ``1 < c < parts``
    up to ``max_replication``, and ``sqrt(parts)`` (the 2D grid) when ``parts`` is a square."""
    s = math.isqrt(parts)
    return [1] + [c for c in range(2, parts) if parts % c == 0 and (c <= max_replication or c == s)]


@dataclass
class GridExchange:
    """Rows every pair of ranks exchanges in one SpMM forward of a c-replicated grid layout.

    Attributes:
        replication: c (1 = the 1D row layout).
        expand: ``[P, P]`` rows rank ``dst`` receives from rank ``src``, indexed ``[dst, src]``.
        fold: ``[P, P]`` partial output rows rank ``src`` sends to their owner ``dst``, ``[src, dst]``.
        nnz: ``[P]`` nonzeros each rank multiplies.
        rows: ``[P]`` rows each rank owns.
        group_nnz: ``[q, q]`` nonzeros with rows in row group i and columns in row group g.
    """

    replication: int
    expand: np.ndarray
    fold: np.ndarray
    nnz: np.ndarray
    rows: np.ndarray
    group_nnz: np.ndarray

    def loads(self) -> list[RankLoad]:
        """One :class:`~gnndist.cost.RankLoad` per rank."""
        peers = lambda m, axis: np.count_nonzero(m, axis=axis)  # noqa: E731
        messages = (np.maximum(peers(self.expand, 0), peers(self.expand, 1))
                    + np.maximum(peers(self.fold, 1), peers(self.fold, 0)))
        table = np.stack([
            self.expand.sum(0), self.expand.sum(1), self.fold.sum(1), self.fold.sum(0),
            messages, self.nnz, self.rows, np.full(len(self.rows), 1 if self.replication == 1 else 2),
        ], axis=1)  # [P, 8] in RankLoad field order (exchanges: the expand, and the fold on a grid)
        return [RankLoad.from_array(row) for row in table]


def grid_exchange(csr: GlobalCSR, offsets: np.ndarray, c: int, chunk: int = ENTRY_CHUNK,
                  threads: int = 1) -> GridExchange:
    """Count the expand and fold of the c-replicated grid layout (see the module docstring).

    Loops over the q = P / c row groups only: a row group's rows are one contiguous id range,
    and inside it the rank of an entry depends on its column alone, so the unique
    (rank, column) pairs of the expand are the group's unique columns.

    Args:
        csr: symmetric adjacency renumbered in new ids (``Partition.csr``).
        offsets: ``[P + 1]`` first new id of each part; parts may be empty.
        c: replication, ``c | P``.
        chunk: adjacency entries counted at once (any value gives the same counts).
        threads: chunks counted at once (sums and a bitmap of seen columns: the same counts at any count).
    """
    off = np.asarray(offsets, dtype=np.int64)
    P = len(off) - 1
    if c < 1 or P % c:
        raise ValueError(f"replication {c} must divide the number of parts {P}")
    q, N = P // c, csr.num_nodes
    owner = np.repeat(np.arange(P, dtype=np.int32 if P < 2**31 else np.int64), np.diff(off))  # [N]
    expand = np.zeros((P, P), dtype=np.int64)
    fold = np.zeros((P, P), dtype=np.int64)
    nnz = np.zeros(P, dtype=np.int64)
    group_nnz = np.zeros((q, q), dtype=np.int64)
    for i in range(q):
        base = i * c  # first rank of row group i
        lo, hi = int(off[base]), int(off[base + c])
        seen = np.zeros(N, dtype=bool)  # the group's distinct columns (threads only ever set True)

        def count(rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            r0, r1 = rows  # rows lo + r0 .. lo + r1
            cols = csr.col[csr.rowptr[lo + r0] : csr.rowptr[lo + r1]]  # [entries of the chunk]
            col_owner = owner[cols]
            j_col = col_owner % c  # grid column of the rank that multiplies each entry
            seen[cols] = True
            fold_bins = None
            if c > 1:
                r = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(csr.rowptr[lo + r0 : lo + r1 + 1]))
                j_row = owner[lo + r] % c
                far = j_col != j_row
                keys = unique_ids((r[far] - r0) * c + j_col[far], (r1 - r0) * c)  # distinct (row, multiplying rank)
                jr = owner[lo + r0 + keys // c] % c
                fold_bins = np.bincount((keys % c) * c + jr, minlength=c * c)
            return np.bincount(j_col, minlength=c), np.bincount(col_owner // c, minlength=q), fold_bins

        fold_keys = np.zeros(c * c, dtype=np.int64)
        for by_col, by_group, fold_bins in in_order(count, row_chunks(csr.rowptr[lo : hi + 1] - csr.rowptr[lo], chunk),
                                                    threads):
            nnz[base : base + c] += by_col
            group_nnz[i] += by_group
            if fold_bins is not None:
                fold_keys += fold_bins
        src = owner[np.flatnonzero(seen)]  # owner of each distinct column
        dst = base + src % c
        far = src != dst
        expand[base : base + c] = np.bincount((dst[far] - base) * P + src[far], minlength=c * P).reshape(c, P)
        if c > 1:
            fold[base : base + c, base : base + c] = fold_keys.reshape(c, c)
    return GridExchange(c, expand, fold, nnz, np.diff(off), group_nnz)


def grid_loads(csr: GlobalCSR, offsets: np.ndarray, c: int, threads: int = 1) -> list[RankLoad]:
    """Per-rank rows of one SpMM forward of the c-replicated grid layout (c = 1: the 1D halo exchange).

    Args:
        csr: symmetric adjacency renumbered in new ids (``Partition.csr``).
        offsets: ``[P + 1]`` first new id of each part (``Partition.book.offsets``).
        c: replication, dividing P.
        threads: chunks counted at once (:func:`grid_exchange`).
    """
    return grid_exchange(csr, offsets, c, threads=threads).loads()


@dataclass
class LayoutCounts:
    """Every layout's counts on a partition, as it stores them.

    Attributes:
        loads: ``{str(c): [RankLoad.as_array() per rank]}`` for every c of :func:`replications`, in that order
            (JSON-ready: ``META.json`` ``layouts``).
        pairs: ``[len(loads), 2, P, P]``: per c (the same order), the rows rank ``k`` receives from each rank in
            the expand (``[c, 0, k, src]``) and sends to each in the fold (``[c, 1, k, dst]``).
    """

    loads: dict[str, list[list[int]]]
    pairs: np.ndarray

    def part_pairs(self, rank: int) -> np.ndarray:
        """``[layouts, 2, P]``: part ``rank``'s row of every layout's expand and fold (its ``layout_pairs`` file)."""
        return np.ascontiguousarray(self.pairs[:, :, rank, :])


def layout_counts(csr: GlobalCSR, offsets: np.ndarray, max_replication: int = 16, threads: int = 1) -> LayoutCounts:
    """The :class:`LayoutCounts` of every c of :func:`replications`, counted on ``threads`` threads (int32 pairs
    where they fit)."""
    P = len(offsets) - 1
    loads, pairs = {}, []
    for c in replications(P, max_replication):
        ex = grid_exchange(csr, offsets, c, threads=threads)
        loads[str(c)] = [ld.as_array()[: RankLoad.STORED].tolist() for ld in ex.loads()]  # the host split: the job's
        pairs.append(np.stack([ex.expand, ex.fold]))
    out = np.stack(pairs)  # [layouts, 2, P, P]
    return LayoutCounts(loads, out.astype(np.int32) if out.max(initial=0) < 2**31 else out)
