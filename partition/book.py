"""Partition book: owner of every node, renumbering to contiguous ranges, local CSR and halo plans.

Ids used here:

* *original* ids: the dataset's node ids ``[0, N)``;
* *new* (global) ids: renumbered so that part ``k`` owns ``[offsets[k], offsets[k+1])``,
  keeping the original order inside a part;
* *local* ids on part ``k``: ``[0, n_owned)`` for owned nodes, then ``[n_owned, n_owned + n_halo)``
  for halo nodes, grouped by owner rank (and sorted by new id inside each owner).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gnndist.errors import UserError


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


def csr_from_edge_index(edge_index: torch.Tensor | np.ndarray, num_nodes: int) -> GlobalCSR:
    """Symmetrise, drop self-loops and duplicates, and sort into CSR.

    Shapes:
        edge_index ``[2, E]`` -> rowptr ``[N + 1]``, col ``[nnz]`` with nnz even (both directions).
    """
    ei = edge_index.numpy() if isinstance(edge_index, torch.Tensor) else np.asarray(edge_index)
    ei = ei.astype(np.int64, copy=False)
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise UserError(f"edge ids must lie in [0, {num_nodes}), found [{ei.min()}, {ei.max()}]")
    keys = ei[0] * num_nodes + ei[1]  # [E] (row, col) pairs
    clean = keys.size == 0 or bool(np.all(keys[1:] > keys[:-1]) and np.all(ei[0] != ei[1]))
    if clean:  # sorted, no duplicates, no self-loops: symmetric iff the transposed pairs are the same set
        clean = np.array_equal(keys, np.sort(ei[1] * num_nodes + ei[0]))
    if clean:
        rows, col = ei[0], ei[1]
    else:
        src, dst = ei[0], ei[1]
        keep = src != dst
        keys = np.unique(np.concatenate([keys[keep], dst[keep] * num_nodes + src[keep]]))  # sorted (row, col)
        rows = keys // num_nodes
        col = keys - rows * num_nodes
    del keys
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_nodes), out=rowptr[1:])
    return GlobalCSR(rowptr, col)


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
    rowptr: np.ndarray  # [n_owned + 1] local CSR rows
    col: np.ndarray  # [nnz_local] local column ids: owned first, then halo grouped by owner
    halo_gid: np.ndarray  # [n_halo] new ids of halo nodes
    recv_counts: np.ndarray  # [P] halo rows received from each rank (= halo grouped by owner)
    send_idx: np.ndarray  # [sum send_counts] owned local ids to send, grouped by destination
    send_counts: np.ndarray  # [P] rows sent to each rank
    orig_id: np.ndarray  # [n_owned + n_halo] original ids of owned then halo nodes
    degree: np.ndarray  # [n_owned + n_halo] global degree (no self-loops)

    @property
    def n_owned(self) -> int:
        return len(self.rowptr) - 1

    @property
    def n_halo(self) -> int:
        return len(self.halo_gid)


def renumbered_csr(csr: GlobalCSR, book: PartitionBook) -> GlobalCSR:
    """The same graph with new ids: rows permuted by the book (each row's entries gathered, no sort).

    Columns keep their order inside a row (renumbered, so no longer ascending).
    """
    deg_new = csr.degree()[book.new2old]  # [N]
    rowptr = np.zeros(csr.num_nodes + 1, dtype=np.int64)
    np.cumsum(deg_new, out=rowptr[1:])
    shift = np.repeat(csr.rowptr[book.new2old] - rowptr[:-1], deg_new)  # [nnz] old position - new position
    shift += np.arange(csr.nnz, dtype=np.int64)
    col = book.old2new[csr.col[shift]]
    return GlobalCSR(rowptr, col)


def build_local_parts(csr: GlobalCSR, book: PartitionBook):
    """Yield the :class:`LocalPart` of every rank, in rank order.

    ``csr`` must already be renumbered (:func:`renumbered_csr`). The loop runs over parts,
    never over nodes or edges; send plans are read off the other parts' halos.
    """
    P = book.parts
    off = book.offsets
    degree = csr.degree()
    halos, bounds = [], []
    for k in range(P):
        cols = csr.col[csr.rowptr[off[k]] : csr.rowptr[off[k + 1]]]
        outside = (cols < off[k]) | (cols >= off[k + 1])
        halos.append(unique_ids(cols[outside], csr.num_nodes))  # sorted new ids: grouped by owner already
        bounds.append(np.searchsorted(halos[-1], off))  # [P + 1] segment of each owner
    for k in range(P):
        lo, hi = off[k], off[k + 1]
        rowptr = csr.rowptr[lo : hi + 1] - csr.rowptr[lo]
        cols = csr.col[csr.rowptr[lo] : csr.rowptr[hi]]
        halo = halos[k]
        n_owned = hi - lo
        inside = (cols >= lo) & (cols < hi)
        local = np.where(inside, cols - lo, n_owned + np.searchsorted(halo, cols))
        recv_counts = np.diff(bounds[k])
        sends = [halos[j][bounds[j][k] : bounds[j][k + 1]] - lo for j in range(P)]  # what j needs from k
        send_counts = np.array([len(s) for s in sends], dtype=np.int64)
        send_idx = np.concatenate(sends) if sends else np.zeros(0, dtype=np.int64)
        ids_new = np.concatenate([np.arange(lo, hi, dtype=np.int64), halo])
        yield LocalPart(
            rank=k,
            rowptr=rowptr.astype(np.int64),
            col=local.astype(np.int64),
            halo_gid=halo.astype(np.int64),
            recv_counts=recv_counts.astype(np.int64),
            send_idx=send_idx.astype(np.int64),
            send_counts=send_counts,
            orig_id=book.new2old[ids_new],
            degree=degree[ids_new].astype(np.int64),
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
    keys = keys[order]
    dst, src = book.new2old[csr.rows()], book.new2old[csr.col]  # [nnz] dataset ids
    idx = np.zeros(csr.nnz, dtype=np.int64)
    missing = np.ones(csr.nnz, dtype=bool)
    for want in (dst * n + src, src * n + dst):  # the edge itself, else its reverse
        pos = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        hit = missing & (keys[pos] == want) if len(keys) else np.zeros(csr.nnz, dtype=bool)
        idx[hit] = order[pos[hit]]
        missing &= ~hit
    if missing.any():
        raise UserError(f"{int(missing.sum())} edges of the graph have no edge features in the dataset")
    return values[idx]


def halo_volumes(csr: GlobalCSR, assign: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows each part receives (its halo size) and sends, without building the parts.

    A (node, needing part) pair is one row of communication volume.

    Shapes:
        -> recv ``[parts]``, send ``[parts]`` int64
    """
    rows = csr.rows()
    need = assign[rows] != assign[csr.col]
    keys = unique_ids(csr.col[need] * parts + assign[rows[need]], csr.num_nodes * parts)  # (source, receiving part)
    del rows, need
    recv = np.bincount(keys % parts, minlength=parts)
    send = np.bincount(assign[keys // parts], minlength=parts)
    return recv.astype(np.int64), send.astype(np.int64)


def comm_volume(csr: GlobalCSR, assign: np.ndarray, parts: int) -> int:
    """Total communication volume: sum over nodes of the number of other parts that need it."""
    return int(halo_volumes(csr, assign, parts)[0].sum())


def check_parts(num_nodes: int, parts: int) -> None:
    if parts < 1:
        raise UserError(f"--parts must be >= 1, got {parts}")
    if parts > num_nodes:
        raise UserError(f"--parts {parts} exceeds the number of nodes ({num_nodes})")
