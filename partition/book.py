"""Partition book: owner of every node, renumbering to contiguous ranges, local CSR and halo plans.

Ids used here:

* *original* ids: the dataset's node ids ``[0, N)``;
* *new* (global) ids: renumbered so that part ``k`` owns ``[offsets[k], offsets[k+1])``,
  keeping the original order inside a part;
* *local* ids on part ``k``: ``[0, n_owned)`` for owned nodes, then ``[n_owned, n_owned + n_halo)``
  for halo nodes, grouped by owner rank (and sorted by new id inside each owner).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from gnndist.datasets.graph import find_pairs

from gnndist.errors import UserError
from gnndist.machine import CHUNK

# adjacency entries a pass that holds ~10 temporaries per entry handles at once, on each of its threads (~100 MiB
# each): the refinement's volume deltas, the layout loads; at CHUNK they were 300-375 MiB at 2 threads at 20M entries
ENTRY_CHUNK = CHUNK // 4


def unique_ids(ids: np.ndarray, size: int) -> np.ndarray:
    """Sorted unique values of ``ids`` in ``[0, size)``: a bitmap scatter (O(n)) when it fits, else a sort."""
    if size <= 1 << 28 and len(ids) > size // 64:
        seen = np.zeros(size, dtype=bool)
        seen[ids] = True
        return np.flatnonzero(seen)
    return np.unique(ids)


@dataclass
class GlobalCSR:
    """Symmetric adjacency in CSR form (row = destination, columns = sources), no self-loops."""

    rowptr: np.ndarray  # [N + 1] int64
    col: np.ndarray  # [nnz] int64

    @property
    def num_nodes(self) -> int:
        return len(self.rowptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.col)

    def degree(self) -> np.ndarray:
        return np.diff(self.rowptr)

    def rows(self) -> np.ndarray:
        """Row (destination) id of every stored entry."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree())


def id_dtype(num_nodes: int) -> type:
    """The narrowest id dtype for ``num_nodes`` nodes: int32 below 2^31, else int64."""
    return np.int32 if num_nodes < 2**31 else np.int64


def row_chunks(rowptr: np.ndarray, chunk: int = CHUNK):
    """``(r0, r1)`` ranges of rows holding about ``chunk`` entries each (at least one row), in order."""
    n = len(rowptr) - 1
    r0 = 0
    while r0 < n:
        r1 = int(np.searchsorted(rowptr, rowptr[r0] + chunk, side="right")) - 1
        r1 = min(max(r1, r0 + 1), n)
        yield r0, r1
        r0 = r1


def csr_from_edge_index(edge_index: torch.Tensor | np.ndarray, num_nodes: int) -> GlobalCSR:
    """Symmetrise, drop self-loops and duplicates, and sort into CSR (int64 columns; see :func:`symmetric_csr`).

    Shapes:
        edge_index ``[2, E]`` -> rowptr ``[N + 1]``, col ``[nnz]`` with nnz even (both directions).
    """
    csr = symmetric_csr(edge_index, num_nodes)
    return GlobalCSR(csr.rowptr, csr.col.astype(np.int64, copy=False))


def in_order(fn, items, threads: int = 1):
    """``fn(item)`` for every item, yielded in order, with up to ``threads`` calls running at once.

    For the pipeline's chunked passes: their numpy sorts and gathers release the GIL, so threads use
    every core, and at most ``threads`` chunks' temporaries are alive at a time.
    """
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def each(fn, items, threads: int = 1) -> None:
    """``fn(item)`` for every item, for its effect (each call fills its own slice), on ``threads`` threads."""
    for _ in in_order(fn, items, threads):
        pass


def _both_directions(ei, e0: int, chunk: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges ``e0 ..`` in both directions without self-loops, grouped by row: (rows, each row's count,
    columns). One sort of ``row << 32 | col`` keys (a sort, not an argsort: ~10x faster) where ids fit
    in 32 bits."""
    src, dst = np.asarray(ei[0, e0 : e0 + chunk]), np.asarray(ei[1, e0 : e0 + chunk])
    keep = src != dst
    r = np.concatenate([src[keep], dst[keep]]).astype(np.int64, copy=False)
    c = np.concatenate([dst[keep], src[keep]]).astype(np.int64, copy=False)
    del src, dst, keep
    if n <= 1 << 31:
        r <<= 32
        r |= c
        del c
        r.sort()
        c = (r & 0xFFFFFFFF).astype(id_dtype(n))
        r >>= 32
    else:
        order = np.argsort(r)
        r, c = r[order], c[order]
        del order
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if len(r) else np.zeros(0, dtype=np.int64)
    return r[first], np.diff(np.r_[first, len(r)]), c


def _unique_rows(col: np.ndarray, rowptr: np.ndarray, r0: int, r1: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``r0 .. r1 - 1`` of ``col`` sorted and de-duplicated: (each row's new length, the columns)."""
    a, b = int(rowptr[r0]), int(rowptr[r1])
    local = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(rowptr[r0 : r1 + 1]))
    nn = np.int64(n)
    keys = local * nn + col[a:b]
    del local
    keys.sort()
    uniq = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, dtype=bool)
    keys = keys[uniq]
    rows = keys // nn
    return np.bincount(rows, minlength=r1 - r0), (keys - rows * nn).astype(col.dtype, copy=False)


def symmetric_csr(edge_index, num_nodes: int, chunk: int = CHUNK, threads: int = 1) -> GlobalCSR:
    """Symmetrise, drop self-loops and duplicates, and sort into CSR, in chunks of ``chunk`` edges.

    The one array of the size of the graph is the result's ``col`` (int32 ids where they fit, see
    :func:`id_dtype`); ``edge_index`` may be a memory-mapped ``[2, E]`` array of int32 or int64 ids,
    read ``chunk`` edges at a time: (1) range check and degree count, (2) a counting sort of both
    directions into ``col``, (3) per row chunk, sort and de-duplicate each row in place. Passes (2)
    and (3) sort a quarter of ``chunk`` at a time, ``threads`` chunks at once (:func:`in_order`); the
    result depends on neither.

    Shapes:
        edge_index ``[2, E]`` -> rowptr ``[N + 1]`` int64, col ``[nnz]`` int32/int64 (both directions).
    """
    ei = edge_index.numpy() if isinstance(edge_index, torch.Tensor) else edge_index
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise UserError(f"edge_index must have shape [2, E], got {list(ei.shape)}")
    if not np.issubdtype(ei.dtype, np.integer):
        raise UserError(f"edge ids must be integers, got {ei.dtype}")
    n, e = int(num_nodes), ei.shape[1]
    chunk = max(int(chunk), 1)
    count = np.zeros(n, dtype=np.int64)
    lo, hi = 0, -1
    for e0 in range(0, e, chunk):  # (1) ids in range, and every row's length before de-duplication
        src, dst = np.asarray(ei[0, e0 : e0 + chunk]), np.asarray(ei[1, e0 : e0 + chunk])
        if src.size:
            lo, hi = min(lo, int(src.min()), int(dst.min())), max(hi, int(src.max()), int(dst.max()))
            if lo < 0 or hi >= n:
                wrapped = " (negative ids in an int32 array: ids beyond 2^31 - 1 wrapped around; store them as " \
                          "int64)" if lo < 0 and ei.dtype == np.int32 else ""
                raise UserError(f"edge ids must lie in [0, {n}), found [{lo}, {hi}]{wrapped}")
        keep = src != dst
        count += np.bincount(src[keep], minlength=n)  # one [n] count alive at a time, not three (their sum)
        count += np.bincount(dst[keep], minlength=n)
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=rowptr[1:])
    del count
    sort = max(chunk // 4, 1)  # (2) and (3) hold ~100 B per edge of a chunk on every thread: a quarter chunk each
    col = np.empty(int(rowptr[-1]), dtype=id_dtype(n))
    fill = rowptr[:-1].copy()  # [N] next free slot of each row
    # (2) counting sort of both directions: each chunk's entries, grouped by row, go to their rows' next slots
    for rows, counts, c in in_order(lambda e0: _both_directions(ei, e0, sort, n), range(0, e, sort), threads):
        start = np.repeat(fill[rows] - np.r_[0, np.cumsum(counts)[:-1]], counts)
        start += np.arange(len(c), dtype=np.int64)
        col[start] = c
        fill[rows] += counts  # rows are distinct here
        del rows, counts, c, start
    del fill
    # (3) sort and de-duplicate every row, in place: a row only shrinks, and the chunks being read lie
    # past every entry written so far
    new_deg = np.zeros(n, dtype=np.int64)
    w = 0
    spans = list(row_chunks(rowptr, sort))
    for (r0, r1), (deg, cols) in zip(spans, in_order(lambda s: _unique_rows(col, rowptr, *s, n), spans, threads)):
        new_deg[r0:r1] = deg
        col[w : w + len(cols)] = cols
        w += len(cols)
        del deg, cols
    np.cumsum(new_deg, out=rowptr[1:])
    return GlobalCSR(rowptr, col[:w])


@dataclass
class PartitionBook:
    """Owner of every node and the renumbering that makes each part a contiguous id range."""

    parts: int
    assign: np.ndarray  # [N] owner part of each original id
    new2old: np.ndarray = field(init=False)  # [N] original id of each new id
    old2new: np.ndarray = field(init=False)  # [N] new id of each original id
    offsets: np.ndarray = field(init=False)  # [P + 1] first new id of each part

    def __post_init__(self) -> None:
        n = len(self.assign)
        self.new2old = np.argsort(self.assign, kind="stable").astype(np.int64)
        self.old2new = np.empty(n, dtype=np.int64)
        self.old2new[self.new2old] = np.arange(n, dtype=np.int64)
        self.offsets = np.zeros(self.parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.assign, minlength=self.parts), out=self.offsets[1:])

    def owner_of_new(self, new_ids: np.ndarray) -> np.ndarray:
        """Owner part of each new id."""
        return np.searchsorted(self.offsets, new_ids, side="right") - 1


@dataclass
class LocalPart:
    """Everything one rank needs: its rows, its local CSR and its halo plans (no pickle)."""

    rank: int
    rowptr: np.ndarray  # [n_owned + 1] local CSR rows: int32 below 2^31 local entries, else int64
    col: np.ndarray  # [nnz_local] local column ids, owned first, then halo grouped by owner: int32 below 2^31 ids
    halo_gid: np.ndarray  # [n_halo] new ids of halo nodes (int32 below 2^31 nodes, as the three below)
    recv_counts: np.ndarray  # [P] halo rows received from each rank (= halo grouped by owner), int64
    send_idx: np.ndarray  # [sum send_counts] owned local ids to send, grouped by destination
    send_counts: np.ndarray  # [P] rows sent to each rank, int64
    orig_id: np.ndarray  # [n_owned + n_halo] original ids of owned then halo nodes
    degree: np.ndarray  # [n_owned + n_halo] global degree (no self-loops)

    @property
    def n_owned(self) -> int:
        return len(self.rowptr) - 1

    @property
    def n_halo(self) -> int:
        return len(self.halo_gid)

    def arrays(self) -> dict[str, np.ndarray]:
        """Its structure as a part stores it (``rowptr``, ``col``, the halo and its plans, ids, degrees): what a
        rank's :class:`~gnndist.strategies.Structure` is read from."""
        return {"rowptr": self.rowptr, "col": self.col, "halo_gid": self.halo_gid, "recv_counts": self.recv_counts,
                "send_idx": self.send_idx, "send_counts": self.send_counts, "orig_id": self.orig_id,
                "degree": self.degree}


def renumbered_csr(csr: GlobalCSR, book: PartitionBook, chunk: int = CHUNK, threads: int = 1) -> GlobalCSR:
    """The same graph with new ids: rows permuted by the book (each row's entries gathered, no sort), in
    chunks of ``chunk`` entries on ``threads`` threads; the columns keep ``csr.col``'s dtype.

    Columns keep their order inside a row (renumbered, so no longer ascending).
    """
    deg_new = csr.degree()[book.new2old]  # [N]
    rowptr = np.zeros(csr.num_nodes + 1, dtype=np.int64)
    np.cumsum(deg_new, out=rowptr[1:])
    col = np.empty(csr.nnz, dtype=csr.col.dtype)
    old2new = book.old2new.astype(csr.col.dtype, copy=False)

    def gather(rows: tuple[int, int]) -> None:  # each chunk fills its own slice of col
        r0, r1 = rows
        pos, _ = entries_of(csr.rowptr, book.new2old[r0:r1])
        col[rowptr[r0] : rowptr[r1]] = old2new[csr.col[pos]]

    each(gather, row_chunks(rowptr, chunk), threads)
    return GlobalCSR(rowptr, col)


def entries_of(rowptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the adjacency entries of ``nodes`` (in their order) and, for each, the index of its node."""
    lens = rowptr[nodes + 1] - rowptr[nodes]
    owner = np.repeat(np.arange(len(nodes), dtype=np.int64), lens)
    start = np.repeat(rowptr[nodes] - np.cumsum(lens) + lens, lens)
    return start + np.arange(len(owner), dtype=np.int64), owner


def build_local_parts(csr: GlobalCSR, book: PartitionBook, threads: int = 1, chunk: int = CHUNK):
    """Yield the :class:`LocalPart` of every rank, in rank order.

    ``csr`` must already be renumbered (:func:`renumbered_csr`). The loop runs over parts,
    never over nodes or edges; send plans are read off the other parts' halos. The halos are
    found on ``threads`` threads (a part each), and a part's local columns in chunks of ``chunk``
    entries on ``threads`` threads, written straight into the narrow dtype they are kept in.
    """
    P = book.parts
    off = book.offsets
    degree = csr.degree()

    def halo_of(k: int) -> np.ndarray:  # sorted new ids of part k's halo: grouped by owner already
        cols = csr.col[csr.rowptr[off[k]] : csr.rowptr[off[k + 1]]]
        return unique_ids(cols[(cols < off[k]) | (cols >= off[k + 1])], csr.num_nodes)

    halos = list(in_order(halo_of, range(P), threads))
    bounds = [np.searchsorted(h, off) for h in halos]  # [P + 1] segment of each owner
    for k in range(P):
        lo, hi = off[k], off[k + 1]
        rowptr = csr.rowptr[lo : hi + 1] - csr.rowptr[lo]
        cols = csr.col[csr.rowptr[lo] : csr.rowptr[hi]]
        halo = halos[k]
        n_owned = hi - lo
        local = np.empty(len(cols), dtype=id_dtype(n_owned + len(halo)))  # [nnz_local]

        def localise(span: tuple[int, int]) -> None:  # owned ids shifted to 0, halo ids after them, in halo order
            s, e = span
            v = cols[s:e].astype(np.int64) - lo
            far = (v < 0) | (v >= n_owned)
            v[far] = n_owned + np.searchsorted(halo, cols[s:e][far])
            local[s:e] = v

        each(localise, ((s, min(s + chunk, len(cols))) for s in range(0, len(cols), chunk)), threads)
        recv_counts = np.diff(bounds[k])
        sends = [halos[j][bounds[j][k] : bounds[j][k + 1]] - lo for j in range(P)]  # what j needs from k
        send_counts = np.array([len(s) for s in sends], dtype=np.int64)
        send_idx = np.concatenate(sends) if sends else np.zeros(0, dtype=np.int64)
        ids_new = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
        ids = id_dtype(csr.num_nodes)  # every id and degree is below N: 4 B each where N < 2^31
        yield LocalPart(
            rank=k,
            rowptr=rowptr.astype(id_dtype(len(cols))),  # the local indices in the narrowest dtype: 4 B per entry
            col=local,
            halo_gid=halo.astype(ids),
            recv_counts=recv_counts.astype(np.int64),
            send_idx=send_idx.astype(id_dtype(n_owned)),
            send_counts=send_counts,
            orig_id=book.new2old[ids_new].astype(ids),
            degree=degree[ids_new].astype(ids),
        )


def edge_values_in_csr(csr: GlobalCSR, book: PartitionBook, edge_index, values: np.ndarray) -> np.ndarray:
    """Per-edge values (edge features) in the order of the renumbered CSR's entries.

    Entry ``(row r, col c)`` of ``csr`` (new ids) is the edge ``c -> r``; it takes the value
    of the dataset's edge ``new2old[c] -> new2old[r]``, or, where the dataset lists only the
    other direction (the graph is symmetrised), that edge's value. Part ``k``'s local edges
    are the entries ``rowptr[offsets[k]] : rowptr[offsets[k + 1]]``, in the same order.

    Shapes:
        edge_index ``[2, E]`` (source, destination; dataset ids), values ``[E, *]`` -> ``[nnz, *]``
    """
    ei = edge_index.numpy() if isinstance(edge_index, torch.Tensor) else np.asarray(edge_index)
    n = np.int64(csr.num_nodes)
    keys = ei[1].astype(np.int64) * n + ei[0]  # [E] (destination, source)
    order = np.argsort(keys, kind="stable")  # the first of duplicate edges wins
    pos = find_pairs(keys[order], book.new2old[csr.rows()], book.new2old[csr.col], csr.num_nodes)  # [nnz]
    if (pos < 0).any():
        raise UserError(f"{int((pos < 0).sum())} edges of the graph have no edge features in the dataset")
    return values[order[pos]]


def exchange_pairs(csr: GlobalCSR, assign: np.ndarray, parts: int, chunk: int = CHUNK,
                   threads: int = 1) -> tuple[np.ndarray, int]:
    """Rows every part sends every other in the 1D halo exchange, and the edge cut, in chunks of rows
    counted on ``threads`` threads (the counts are sums: the same at any chunk and thread count).

    Node ``u`` of part ``a`` is sent to every other part holding one of its neighbours (the graph is
    symmetric, so those are the distinct parts in row ``u``).

    Shapes:
        assign ``[N]`` -> pair ``[parts, parts]`` int64 (``[src, dst]``), edge cut (undirected edges)
    """

    def count(rows: tuple[int, int]) -> tuple[np.ndarray, int]:
        r0, r1 = rows
        deg = np.diff(csr.rowptr[r0 : r1 + 1])
        local = np.repeat(np.arange(r1 - r0, dtype=np.int64), deg)
        q = assign[csr.col[csr.rowptr[r0] : csr.rowptr[r1]]]  # [entries] part of each neighbour
        cross = int((q != np.repeat(assign[r0:r1], deg)).sum())
        keys = unique_ids(local * parts + q, (r1 - r0) * parts)  # distinct (row, neighbour part)
        own = assign[r0 + keys // parts]
        q = keys % parts
        far = q != own
        return np.bincount(own[far] * parts + q[far], minlength=parts * parts), cross

    pair = np.zeros(parts * parts, dtype=np.int64)
    cross = 0
    for p, c in in_order(count, row_chunks(csr.rowptr, chunk), threads):
        pair += p
        cross += c
    return pair.reshape(parts, parts), cross // 2


def halo_volumes(csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1,
                 chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Rows each part receives (its halo size) and sends, without building the parts (counted ``chunk`` entries at
    a time on ``threads`` threads, :func:`exchange_pairs`).

    A (node, needing part) pair is one row of communication volume.

    Shapes:
        -> recv ``[parts]``, send ``[parts]`` int64
    """
    pair, _ = exchange_pairs(csr, assign, parts, chunk, threads)
    return pair.sum(0), pair.sum(1)


def comm_volume(csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1, chunk: int = CHUNK) -> int:
    """Total communication volume: sum over nodes of the number of other parts that need it (:func:`halo_volumes`)."""
    return int(halo_volumes(csr, assign, parts, threads, chunk)[0].sum())


def check_parts(num_nodes: int, parts: int) -> None:
    if parts < 1:
        raise UserError(f"--parts must be >= 1, got {parts}")
    if parts > num_nodes:
        raise UserError(f"--parts {parts} exceeds the number of nodes ({num_nodes})")
