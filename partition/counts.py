"""Neighbour-part counts ``cnt[v, p]`` (neighbours of node ``v`` in part ``p``), dense or sparse.

The refinement (:mod:`gnndist.partition.refine`) and the volume weights
(:func:`gnndist.partition.balance.volume_weights`) read and update these counts. A dense
``[N, P]`` int32 table is fastest but takes ``4 N P`` bytes: 28 GB at ``P = 64`` on
ogbn-papers100M. Most of its cells are zero (an interior node has one non-zero cell, its own
part), so above :data:`DENSE_MAX_CELLS` cells the counts are held sparse: the non-zero cells'
keys ``v * P + p`` sorted (int64) with their counts (int32), 12 bytes per non-zero cell.

Both classes answer the same questions with the same numbers (``tests/test_partition_counts.py``
checks that the refinement moves the same nodes either way); :func:`part_counts` picks one.
"""

from __future__ import annotations

import numpy as np
from gnndist.partition.book import GlobalCSR, each, in_order

from gnndist.machine import CHUNK

DENSE_MAX_CELLS = 1 << 27  # N * P up to this: a dense int32 table (512 MiB), else sparse


def _row_chunks(csr: GlobalCSR, parts: int, chunk: int = CHUNK):
    """Row ranges ``(r0, r1)`` holding at most ~``chunk`` entries and ``chunk`` cells of ``[rows, P]``."""
    n, r0 = csr.num_nodes, 0
    while r0 < n:
        r1 = int(np.searchsorted(csr.rowptr, csr.rowptr[r0] + chunk, side="right")) - 1
        r1 = min(max(r1, r0 + 1), n, r0 + max(chunk // parts, 1))
        yield r0, r1
        r0 = r1


def _chunk_cells(csr: GlobalCSR, assign: np.ndarray, parts: int, r0: int, r1: int) -> np.ndarray:
    """``[(r1 - r0) * P]`` int64 neighbour counts of rows ``r0 .. r1`` (row-major)."""
    lo, hi = csr.rowptr[r0], csr.rowptr[r1]
    local = np.repeat(np.arange(r1 - r0, dtype=np.int64) * parts, np.diff(csr.rowptr[r0 : r1 + 1]))
    return np.bincount(local + assign[csr.col[lo:hi]], minlength=(r1 - r0) * parts)


class DenseCounts:
    """``cnt`` as one ``[N, P]`` int32 table (:attr:`table`), counted ``chunk`` entries at a time on ``threads``
    threads (each chunk fills its own rows)."""

    def __init__(self, csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1, chunk: int = CHUNK):
        n = csr.num_nodes
        self.n, self.parts = n, parts
        flat = np.empty(n * parts, dtype=np.int32)

        def fill(rows: tuple[int, int]) -> None:
            r0, r1 = rows
            flat[r0 * parts : r1 * parts] = _chunk_cells(csr, assign, parts, r0, r1)

        each(fill, _row_chunks(csr, parts, chunk), threads)
        self.table = flat.reshape(n, parts)  # [N, P]

    @classmethod
    def of(cls, table: np.ndarray) -> DenseCounts:
        """Wrap an ``[N, P]`` int32 table of counts (not copied)."""
        self = cls.__new__(cls)
        self.n, self.parts = table.shape
        self.table = table
        return self

    def get(self, v: np.ndarray, p: np.ndarray) -> np.ndarray:
        """``cnt[v, p]`` for arrays of nodes and parts."""
        return self.table.reshape(-1)[np.asarray(v, dtype=np.int64) * self.parts + p]

    def row(self, v: int) -> np.ndarray:
        """``[P]`` counts of node ``v``."""
        return self.table[v]

    def rows(self, vs: np.ndarray) -> np.ndarray:
        """``[K, P]`` int32 counts of nodes ``vs`` (a copy)."""
        return self.table[vs]

    def nonzero_per_row(self) -> np.ndarray:
        """``[N]`` parts each node has a neighbour in."""
        return np.count_nonzero(self.table, axis=1)

    def pairs_in(self, parts_sorted: np.ndarray, assign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nodes ``v`` and indices ``j`` into ``parts_sorted`` with ``cnt[v, parts_sorted[j]] > 0`` and
        ``v`` outside that part, row-major (``v`` ascending, then ``j``)."""
        near = self.table[:, parts_sorted] > 0  # [N, len(parts_sorted)]
        near &= assign[:, None] != parts_sorted[None, :]
        return np.nonzero(near)

    def in_part(self, p: int) -> np.ndarray:
        """Nodes (ascending) with a neighbour in part ``p``."""
        return np.flatnonzero(self.table[:, p] > 0)

    def send_pairs(self, assign: np.ndarray) -> np.ndarray:
        """``[P, P]`` int64 rows part ``a`` sends part ``p``: its nodes with a neighbour in ``p != a``."""
        n, parts = self.n, self.parts
        has = self.table > 0
        has[np.arange(n), assign] = False  # [N, P] parts that need v's row
        return np.bincount((assign[:, None] * parts + np.arange(parts)).ravel(), weights=has.ravel(),
                           minlength=parts * parts).reshape(parts, parts).astype(np.int64)

    def move_neighbours(self, u: np.ndarray, sources: np.ndarray, targets: np.ndarray) -> None:
        """One neighbour ``u[i]`` of a moved node left part ``sources[i]`` for ``targets[i]``: update."""
        if not len(u):
            return
        flat = self.table.reshape(-1)
        flat -= np.bincount(u * self.parts + sources, minlength=flat.size).astype(np.int32)
        flat += np.bincount(u * self.parts + targets, minlength=flat.size).astype(np.int32)

    def add(self, u: np.ndarray, p: int, delta: int) -> None:
        """``cnt[u, p] += delta`` for distinct nodes ``u``."""
        self.table[u, p] += delta


class SparseCounts:
    """``cnt`` as its non-zero cells: sorted keys ``v * P + p`` (int64) and counts (int32).

    Cells that fall to zero stay (count 0) until the next merge; cells that become non-zero go to a
    small sorted side table first and are merged into the main one when it grows past
    :attr:`pending_max` (or before a whole-table question), so a single node's move costs its degree.
    Counted ``chunk`` entries at a time on ``threads`` threads, joined in row order.
    """

    def __init__(self, csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1, chunk: int = CHUNK):
        self.n, self.parts = csr.num_nodes, parts

        def cells(rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
            r0, r1 = rows
            c = _chunk_cells(csr, assign, parts, r0, r1)
            nz = np.flatnonzero(c)
            return nz + r0 * parts, c[nz].astype(np.int32)

        keys, vals = [], []
        for k, v in in_order(cells, _row_chunks(csr, parts, chunk), threads):
            keys.append(k)
            vals.append(v)
        self.keys = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
        self.vals = np.concatenate(vals) if vals else np.zeros(0, dtype=np.int32)
        self.pkeys = np.zeros(0, dtype=np.int64)  # side table: new non-zero cells, sorted
        self.pvals = np.zeros(0, dtype=np.int32)
        self.pending_max = max(1 << 16, len(self.keys) >> 6)
        self._index()

    @property
    def cells(self) -> int:
        """Cells held (non-zero ones and those that fell to zero since the last merge)."""
        return len(self.keys) + len(self.pkeys)

    def _index(self) -> None:
        self.kpart = (self.keys % self.parts).astype(np.int16 if self.parts < 2**15 else np.int32)
        self.rowptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.keys // self.parts, minlength=self.n), out=self.rowptr[1:])

    def _merge(self) -> None:
        """Fold the side table into the main one and drop the cells at zero."""
        if len(self.pkeys) == 0 and (self.vals > 0).all():
            return
        keep, pkeep = self.vals > 0, self.pvals > 0
        keys, vals, pkeys = self.keys[keep], self.vals[keep], self.pkeys[pkeep]
        at = np.searchsorted(keys, pkeys)
        self.keys, self.vals = np.insert(keys, at, pkeys), np.insert(vals, at, self.pvals[pkeep])
        self.pkeys, self.pvals = self.pkeys[:0], self.pvals[:0]
        self.pending_max = max(1 << 16, len(self.keys) >> 6)
        self._index()

    @staticmethod
    def _find(keys: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.searchsorted(keys, q)
        i = np.minimum(i, max(len(keys) - 1, 0))
        return i, (keys[i] == q) if len(keys) else np.zeros(len(q), dtype=bool)

    def get(self, v: np.ndarray, p: np.ndarray) -> np.ndarray:
        q = np.asarray(v, dtype=np.int64) * self.parts + p
        i, hit = self._find(self.keys, q)
        out = np.where(hit, self.vals[i] if len(self.vals) else 0, 0).astype(np.int32)
        if len(self.pkeys):
            j, phit = self._find(self.pkeys, q)
            out = np.where(phit, self.pvals[j], out)
        return out

    def row(self, v: int) -> np.ndarray:
        out = np.zeros(self.parts, dtype=np.int32)
        lo, hi = self.rowptr[v], self.rowptr[v + 1]
        out[self.kpart[lo:hi]] = self.vals[lo:hi]
        if len(self.pkeys):
            a, b = np.searchsorted(self.pkeys, [v * self.parts, (v + 1) * self.parts])
            out[self.pkeys[a:b] - v * self.parts] = self.pvals[a:b]
        return out

    def rows(self, vs: np.ndarray) -> np.ndarray:
        self._merge()
        vs = np.asarray(vs, dtype=np.int64)
        lens = self.rowptr[vs + 1] - self.rowptr[vs]
        owner = np.repeat(np.arange(len(vs), dtype=np.int64), lens)
        pos = np.repeat(self.rowptr[vs] - np.cumsum(lens) + lens, lens) + np.arange(len(owner), dtype=np.int64)
        out = np.zeros((len(vs), self.parts), dtype=np.int32)
        out[owner, self.kpart[pos]] = self.vals[pos]
        return out

    def nonzero_per_row(self) -> np.ndarray:
        self._merge()
        return np.diff(self.rowptr)

    def pairs_in(self, parts_sorted: np.ndarray, assign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._merge()
        slot = np.full(self.parts, -1, dtype=np.int64)
        slot[parts_sorted] = np.arange(len(parts_sorted))
        j = slot[self.kpart]
        i = np.flatnonzero(j >= 0)
        v = self.keys[i] // self.parts
        out = assign[v] != self.kpart[i]
        return v[out], j[i[out]]

    def in_part(self, p: int) -> np.ndarray:
        i = np.flatnonzero((self.kpart == p) & (self.vals > 0))
        v = self.keys[i] // self.parts
        if len(self.pkeys):
            pi = np.flatnonzero((self.pkeys % self.parts == p) & (self.pvals > 0))
            v = np.sort(np.concatenate([v, self.pkeys[pi] // self.parts]))
        return v

    def send_pairs(self, assign: np.ndarray) -> np.ndarray:
        self._merge()
        parts = self.parts
        a = assign[self.keys // parts]
        out = a != self.kpart
        return np.bincount(a[out] * parts + self.kpart[out], minlength=parts * parts).reshape(parts, parts)

    def move_neighbours(self, u: np.ndarray, sources: np.ndarray, targets: np.ndarray) -> None:
        if not len(u):
            return
        q = np.concatenate([u * self.parts + sources, u * self.parts + targets])
        d = np.concatenate([np.full(len(u), -1, dtype=np.int64), np.ones(len(u), dtype=np.int64)])
        uq, inv = np.unique(q, return_inverse=True)
        self._add_keys(uq, np.bincount(inv, weights=d, minlength=len(uq)).astype(np.int64))

    def add(self, u: np.ndarray, p: int, delta: int) -> None:
        q = np.sort(np.asarray(u, dtype=np.int64) * self.parts + p)
        self._add_keys(q, np.full(len(q), delta, dtype=np.int64))

    def _add_keys(self, q: np.ndarray, d: np.ndarray) -> None:
        """``cnt[q] += d`` for sorted distinct keys ``q``."""
        keep = d != 0
        q, d = q[keep], d[keep]
        i, hit = self._find(self.keys, q)
        self.vals[i[hit]] += d[hit].astype(np.int32)
        q, d = q[~hit], d[~hit]
        if len(q) and len(self.pkeys):
            j, phit = self._find(self.pkeys, q)
            self.pvals[j[phit]] += d[phit].astype(np.int32)
            q, d = q[~phit], d[~phit]
        if len(q):  # new non-zero cells (a count never falls below zero: these are all gains)
            at = np.searchsorted(self.pkeys, q)
            self.pkeys, self.pvals = np.insert(self.pkeys, at, q), np.insert(self.pvals, at, d.astype(np.int32))
            if len(self.pkeys) > self.pending_max:
                self._merge()


def part_counts(csr: GlobalCSR, assign: np.ndarray, parts: int, sparse: bool | None = None, threads: int = 1,
                chunk: int = CHUNK):
    """Neighbour-part counts of ``assign``: dense up to :data:`DENSE_MAX_CELLS` cells, else sparse
    (``sparse`` forces one); counted ``chunk`` entries at a time on ``threads`` threads (the same counts at any
    chunk and count)."""
    if sparse is None:
        sparse = csr.num_nodes * parts > DENSE_MAX_CELLS
    return (SparseCounts if sparse else DenseCounts)(csr, assign, parts, threads, chunk)


def as_counts(counts):
    """``counts`` as a counts object: a dense ``[N, P]`` table wrapped (:meth:`DenseCounts.of`), else as it is."""
    return DenseCounts.of(counts) if isinstance(counts, np.ndarray) else counts
