"""A rank's part as the partition stored it, read for the layouts: :class:`Structure` and the chunked split of its
rows into interior and boundary columns (:func:`split_columns`). Every layout (:mod:`gnndist.strategies.base`)
builds its block from it; :class:`~gnndist.graph.DistGraph` makes it from the part's arrays.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnndist.files import drop_pages
from gnndist.kernels import CSR
from gnndist.kernels.csr import index_dtype

INDEX_CHUNK = 1 << 20  # entries read at once from a part's (memory-mapped) columns

@dataclass(frozen=True)
class Structure:
    """A rank's part as the partition stored it, what every strategy builds on (:class:`~gnndist.graph.DistGraph`
    makes it).

    The part's rows of ``A`` stay where the partition stored them (``rowptr`` and ``col`` as
    read, memory-mapped by :func:`~gnndist.partition.read_part`): a layout reads them once to
    build its block (:meth:`split`, :attr:`csr`), in chunks whose pages are let go, so no rank
    keeps a second copy of its entries next to its block.

    Attributes:
        rank: the rank this part belongs to.
        n_owned: rows this rank owns.
        rowptr, col: its rows of ``A`` in local ids ``[n_owned, n_owned + n_halo]``, as stored
            (numpy, any integer dtype; each row's columns in global id order).
        halo_gid: global (new) ids of the halo ``[n_halo]``, grouped by owner.
        send_idx: local rows sent to each peer, grouped by peer ``[sum send_counts]``.
        send_counts: rows sent to each rank ``[P]``.
        recv_counts: rows received from each rank ``[P]``.
        offsets: first global (new) id of every rank's rows ``[P + 1]``.
        layouts: every layout's per-rank counts (``META.json`` ``layouts``; empty for older partitions).
        device: where the CSRs built from it live.
        layout_pairs: ``[layouts, 2, P]`` this rank's rows from every rank in each layout's expand and to every
            rank in its fold, the layouts in ``layouts``' order (:class:`gnndist.partition.layouts.LayoutCounts`);
            ``None`` for partitions made before it was stored.
    """

    rank: int
    n_owned: int
    rowptr: np.ndarray
    col: np.ndarray
    halo_gid: Tensor
    send_idx: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    offsets: tuple[int, ...]
    layouts: dict
    device: torch.device = torch.device("cpu")
    layout_pairs: np.ndarray | None = None

    @property
    def n_halo(self) -> int:
        return int(self.halo_gid.numel())

    @property
    def nnz(self) -> int:
        return int(self.rowptr[-1])

    @property
    def csr(self) -> CSR:
        """Its rows of ``A`` ``[n_owned, n_owned + n_halo]`` in the narrowest index dtype, read anew from the part
        (the caller keeps it as long as it needs it; :meth:`DistGraph.csr <gnndist.graph.DistGraph.csr>` keeps one)."""
        dt = index_dtype(self.nnz, self.n_owned + self.n_halo)
        np_dt = np.int32 if dt == torch.int32 else np.int64
        col = np.empty(self.nnz, dtype=np_dt)  # [nnz]
        for s, e in _chunks(self.nnz):
            col[s:e] = self.col[s:e]
            drop_pages(self.col, s, e)
        rowptr = torch.from_numpy(np.asarray(self.rowptr).astype(np_dt))  # [n_owned + 1]
        return CSR(rowptr, torch.from_numpy(col), self.n_owned + self.n_halo).to(self.device)

    def split(self) -> tuple[CSR, CSR]:
        """Its rows of ``A`` split at column ``n_owned``: interior ``[n_owned, n_owned]`` and boundary
        ``[n_owned, n_halo]`` (columns shifted by ``n_owned``), each row's columns ascending, in the narrowest
        index dtype. Read from the part in chunks of :data:`INDEX_CHUNK` entries (two passes): the only
        whole arrays made are the two CSRs' own, one index per entry."""
        return split_columns(self.rowptr, self.col, self.n_owned, self.n_halo, self.device)


def _chunks(n: int, size: int = INDEX_CHUNK):
    """``(start, stop)`` of consecutive ranges of at most ``size`` covering ``[0, n)``."""
    return ((s, min(s + size, n)) for s in range(0, n, size))


def split_columns(rowptr: np.ndarray, col: np.ndarray, n_owned: int, n_halo: int,
                  device: torch.device | str = "cpu") -> tuple[CSR, CSR]:
    """``(rowptr, col)`` split at column ``n_owned`` into interior and (shifted) boundary CSRs; see
    :meth:`Structure.split`.

    A row's entries keep their order in each half; where a half's columns are not ascending
    within a row (a part not written in global id order) that half is sorted, so the result is
    the same as sorting every edge by ``(row, col)`` (:meth:`CSR.from_coo`).

    Shapes:
        rowptr ``[n + 1]``, col ``[nnz]`` -> CSR ``[n, n_owned]``, CSR ``[n, n_halo]``
    """
    rp = np.asarray(rowptr, dtype=np.int64)  # [n + 1]
    n, nnz = len(rp) - 1, int(rp[-1])
    dt = index_dtype(nnz, n_owned + n_halo)
    np_dt = np.int32 if dt == torch.int32 else np.int64
    inner = np.zeros(n + 1, dtype=np.int64)  # [n + 1] interior entries before each row's first
    before = []  # interior entries before each chunk
    done = 0
    for s, e in _chunks(nnz):  # pass 1: count
        cum = np.cumsum(np.asarray(col[s:e]) < n_owned, dtype=np.int64)  # [chunk]
        lo, hi = np.searchsorted(rp, [s, e], side="right")  # rows with s < rp[i] <= e
        inner[lo:hi] = done + cum[rp[lo:hi] - s - 1]
        before.append(done)
        done += int(cum[-1])
        drop_pages(col, s, e)
    col_int = np.empty(done, dtype=np_dt)  # [nnz_int]
    col_bnd = np.empty(nnz - done, dtype=np_dt)  # [nnz_bnd]
    for (s, e), a in zip(_chunks(nnz), before):  # pass 2: fill
        c = np.asarray(col[s:e])
        interior = c < n_owned
        k = int(interior.sum())
        col_int[a : a + k] = c[interior]
        col_bnd[s - a : e - a - k] = c[~interior] - n_owned
        drop_pages(col, s, e)
    halves = []
    for ptr, cols, width in ((inner, col_int, n_owned), (rp - inner, col_bnd, n_halo)):
        csr = CSR(torch.from_numpy(ptr.astype(np_dt)), torch.from_numpy(cols), width)
        if not _rows_ascending(ptr, cols):
            csr = CSR.from_coo(csr.row, csr.col, n, width)
        halves.append(csr.to(device))
    return halves[0], halves[1]


def _rows_ascending(rowptr: np.ndarray, col: np.ndarray) -> bool:
    """Whether every row's columns are ascending (a descent only where a row starts)."""
    for s, e in _chunks(max(len(col) - 1, 0)):
        down = np.flatnonzero(col[s + 1 : e + 1] < col[s:e]) + (s + 1)  # positions after a descent
        at = np.searchsorted(rowptr, down)  # the first row starting at or after each
        if down.size and not (rowptr[np.minimum(at, len(rowptr) - 1)] == down).all():
            return False
    return True


def _tensor(arr: np.ndarray, device: torch.device) -> Tensor:
    """``arr`` as a tensor on ``device``, sharing its memory on the CPU (a mapped part's pages: no copy at load).
    Nothing writes to a loaded part (every transform makes a new tensor): torch's read-only warning is not raised."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr).to(device)


def part_tensors(arrays: dict, meta: dict, rank: int, device: torch.device) -> tuple[dict[str, Tensor], Structure]:
    """A part's arrays (numpy, as read) as tensors on ``device``, its rows of ``A`` aside (they stay as stored,
    mapped: the strategy reads them into its own block), and the part's :class:`Structure` (``meta``: its
    partition's META.json)."""
    t = {k: _tensor(v, device) for k, v in arrays.items() if k not in ("rowptr", "col", "layout_pairs")}
    return t, Structure(rank, len(arrays["rowptr"]) - 1, arrays["rowptr"], arrays["col"], t["halo_gid"],
                        t["send_idx"], t["send_counts"].tolist(), t["recv_counts"].tolist(),
                        tuple(int(o) for o in meta["offsets"]), meta.get("layouts") or {}, device,
                        np.asarray(arrays["layout_pairs"]) if "layout_pairs" in arrays else None)
