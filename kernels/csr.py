"""Compressed sparse row adjacency shared by every kernel, with its transpose and row index cached.

Row ``i`` of the CSR lists the edges whose *destination* is node ``i`` (the node that
aggregates); ``col[e]`` is the source of edge ``e``. So ``spmm(csr, x)[i]`` sums the
features of row ``i``'s in-neighbours, and the transpose carries gradients back to sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor


class CSR:
    """A sparse ``[n_rows, num_cols]`` pattern: ``rowptr`` ``[n_rows + 1]``, ``col`` ``[nnz]``.

    Indices may be int32 or int64 (``rowptr`` and ``col`` share one dtype; :func:`index_dtype`
    says which fits). Derived tensors (``row``, the transpose, the degree order) are computed
    once and cached, so a layer can call several kernels on one graph without paying for them again.

    Args:
        rowptr: row offsets, non-decreasing, ``rowptr[0] == 0``, ``rowptr[-1] == nnz``.
        col: column (source node) of every edge, sorted by row.
        num_cols: number of columns (source nodes); ``col < num_cols``.
        symmetric: the pattern is its own transpose (square, ``(i, j)`` stored iff ``(j, i)`` is,
            each row's columns ascending), so :meth:`transposed` is this CSR and builds nothing
            (default False). Whoever builds the CSR knows it (the interior block of a symmetrised
            graph); it is not checked.

    Shapes:
        rowptr ``[n_rows + 1]``, col ``[nnz]``
    """

    def __init__(self, rowptr: Tensor, col: Tensor, num_cols: int, symmetric: bool = False) -> None:
        if rowptr.dim() != 1 or col.dim() != 1:
            raise ValueError(f"rowptr and col must be 1-d, got {tuple(rowptr.shape)} and {tuple(col.shape)}")
        if rowptr.dtype not in (torch.int32, torch.int64) or col.dtype != rowptr.dtype:
            raise ValueError(f"rowptr and col must share an int32/int64 dtype, got {rowptr.dtype} and {col.dtype}")
        if rowptr.device != col.device:
            raise ValueError(f"rowptr is on {rowptr.device} but col is on {col.device}")
        self.rowptr = rowptr
        self.col = col
        self.num_cols = int(num_cols)
        if symmetric and self.n_rows != self.num_cols:
            raise ValueError(f"a symmetric CSR is square, got {self.n_rows} x {self.num_cols}")
        self.symmetric = bool(symmetric)
        self._row: Tensor | None = None
        self._transpose: tuple[CSR, Tensor] | None = None
        self._transposed: CSR | None = None
        self._row_order: Tensor | None = None
        self._cache: dict[tuple, object] = {}  # see cached()

    @property
    def n_rows(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.col.device

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, self.num_cols

    @property
    def row(self) -> Tensor:
        """Row (destination) of every edge, cached. ``[nnz]``, dtype of ``col``."""
        if self._row is None:
            rows = torch.arange(self.n_rows, device=self.device, dtype=self.col.dtype)
            self._row = torch.repeat_interleave(rows, self.in_degree(), output_size=self.nnz)
        return self._row

    def in_degree(self) -> Tensor:
        """Number of edges in every row. ``[n_rows]``, index dtype."""
        return self.rowptr[1:] - self.rowptr[:-1]

    def out_degree(self) -> Tensor:
        """Number of edges in every column. ``[num_cols]``, int64."""
        return torch.bincount(self.col, minlength=self.num_cols)

    def transpose(self) -> tuple[CSR, Tensor]:
        """CSR of ``A^T`` (``num_cols`` rows) and ``perm``: edge ``k`` of ``A^T`` is edge ``perm[k]`` of ``A``.

        Cached; the transpose of the transpose is this CSR again. Permute edge values
        with ``values[perm]``.

        Shapes:
            perm ``[nnz]`` int64
        """
        if self._transpose is None:
            # Rows are sorted, so a stable sort by column orders edges by (col, row).
            perm = torch.sort(self.col, stable=True).indices  # [nnz]
            counts = torch.bincount(self.col, minlength=self.num_cols)  # [num_cols]
            rowptr_t = _offsets(counts, self.col.dtype)
            csr_t = CSR(rowptr_t, self.row[perm], self.n_rows)
            csr_t._transpose = (self, torch.argsort(perm))
            self._transpose = (csr_t, perm)
        return self._transpose

    def transposed(self) -> CSR:
        """The pattern of ``A^T`` alone (``num_cols`` rows): what an unweighted backward multiplies by; cached.

        This CSR itself when it is ``symmetric`` (nothing is built). Otherwise the CSR of
        :meth:`transpose` (the same entries in the same order) without the edge permutation,
        its inverse or a cached ``row``: one index per entry, in the index dtype.
        """
        if self.symmetric:
            return self
        if self._transpose is not None:
            return self._transpose[0]
        if self._transposed is None:
            order = torch.sort(self.col, stable=True).indices  # [nnz] int64, for the build only
            rows = torch.arange(self.n_rows, device=self.device, dtype=self.col.dtype)
            col_t = torch.repeat_interleave(rows, self.in_degree(), output_size=self.nnz)[order]  # [nnz]
            del order
            counts = torch.bincount(self.col, minlength=self.num_cols)  # [num_cols]
            self._transposed = CSR(_offsets(counts, self.col.dtype), col_t, self.n_rows)
        return self._transposed

    def row_order(self) -> Tensor:
        """Rows by decreasing degree, cached: launching heavy rows first balances power-law graphs. ``[n_rows]``
        int32."""
        if self._row_order is None:
            order = torch.sort(self.in_degree(), descending=True, stable=True).indices
            self._row_order = order.to(torch.int32)
        return self._row_order

    def mean_divisor(self, dtype: torch.dtype, per_edge: bool = False) -> Tensor:
        """What ``reduce="mean"`` divides a row by: ``max(deg, 1)`` (so a row without edges gives 0), as ``dtype``.

        The one home of the mean's scaling (the Triton kernels apply the same ``max(deg, 1)``
        on the device). ``per_edge``: the divisor of every edge's row.

        Shapes:
            ``[n_rows]``, or ``[nnz]`` with ``per_edge``
        """
        divisor = degree_divisor(self.in_degree(), dtype)  # [n_rows]
        return divisor[self.row] if per_edge else divisor

    def mean_scale(self, dtype: torch.dtype, per_edge: bool = False) -> Tensor:
        """``1 / mean_divisor``: the factor ``reduce="mean"`` gives every row (or every edge, ``per_edge``).

        Shapes:
            ``[n_rows]``, or ``[nnz]`` with ``per_edge``
        """
        return 1.0 / self.mean_divisor(dtype, per_edge)

    # ------------------------------------------------------------------ cache of derived objects
    # Kernel paths keep what they derive from this CSR (a sparse tensor, a segment plan, a measured
    # choice) here, under a tuple key whose first item names the kind. Only these methods touch it.
    def cached(self, key: tuple, build: Callable[[], object]) -> object:
        """The object kept under ``key``, built by ``build()`` on first use (nothing is kept if it raises)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def peek(self, key: tuple) -> object | None:
        """The object kept under ``key``, or None; builds nothing."""
        return self._cache.get(key)

    def cached_items(self, kind: str) -> dict[tuple, object]:
        """Everything kept under keys ``(kind, *rest)``: ``rest -> object``."""
        return {k[1:]: v for k, v in self._cache.items() if k[:1] == (kind,)}

    @staticmethod
    def from_coo(row: Tensor, col: Tensor, n_rows: int, n_cols: int) -> CSR:
        """Build from edge lists in any order; edges are sorted by (row, col). Duplicates are kept.

        Shapes:
            row, col ``[nnz]`` (int32 or int64; the CSR keeps ``col``'s dtype)
        """
        if row.shape != col.shape or row.dim() != 1:
            raise ValueError(f"row and col must be 1-d of one length, got {tuple(row.shape)} and {tuple(col.shape)}")
        dtype = col.dtype if col.dtype in (torch.int32, torch.int64) else torch.int64
        if row.numel() and (int(row.min()) < 0 or int(row.max()) >= n_rows):
            raise ValueError(f"row index out of range [0, {n_rows})")
        if col.numel() and (int(col.min()) < 0 or int(col.max()) >= n_cols):
            raise ValueError(f"col index out of range [0, {n_cols})")
        key = row.long() * n_cols + col.long()  # [nnz]
        order = torch.argsort(key)
        counts = torch.bincount(row.long(), minlength=n_rows)  # [n_rows]
        return CSR(_offsets(counts, dtype), col[order].to(dtype), n_cols)

    def to(self, device: torch.device | str) -> CSR:
        """This CSR on ``device`` (cached row, transpose and order travel too)."""
        device = torch.device(device)
        if device == self.device:
            return self
        out = CSR(self.rowptr.to(device), self.col.to(device), self.num_cols, self.symmetric)
        if self._transposed is not None:
            out._transposed = self._transposed.to(device)
        if self._row is not None:
            out._row = self._row.to(device)
        if self._row_order is not None:
            out._row_order = self._row_order.to(device)
        if self._transpose is not None:
            csr_t, perm = self._transpose
            csr_t = CSR(csr_t.rowptr.to(device), csr_t.col.to(device), csr_t.num_cols)
            csr_t._transpose = (out, self._transpose[0]._transpose[1].to(device))
            out._transpose = (csr_t, perm.to(device))
        return out

    def __repr__(self) -> str:
        return (f"CSR(n_rows={self.n_rows}, num_cols={self.num_cols}, nnz={self.nnz}, "
                f"dtype={self.col.dtype}, device={self.device})")


def degree_divisor(degree: Tensor, dtype: torch.dtype) -> Tensor:
    """``max(degree, 1)`` as ``dtype``: what a mean over a row's neighbours divides by (a row without any gives 0).

    The one home of the mean's scaling: :meth:`CSR.mean_divisor` (the kernels, with the CSR's own degrees),
    ``DistGraph.spmm(reduce="mean")`` (global degrees) and the per-edge ``mean`` of ``MessagePassing`` use it.
    """
    return degree.clamp(min=1).to(dtype)


def index_dtype(nnz: int, *sizes: int) -> torch.dtype:
    """The index dtype of a CSR with ``nnz`` entries and these row / column counts: int32 when all are below 2**31."""
    return torch.int32 if max(nnz, *sizes) < 2**31 else torch.int64


def _offsets(counts: Tensor, dtype: torch.dtype) -> Tensor:
    """Row offsets ``[0, c0, c0 + c1, ...]`` from per-row counts. ``[len(counts) + 1]``."""
    rowptr = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=rowptr[1:])
    return rowptr.to(dtype)


def rows2d(t: Tensor) -> Tensor:
    """``t`` as ``[rows, everything else]`` (a view where possible), also when it has no rows
    (``reshape(0, -1)`` fails).

    Shapes:
        t ``[n, *]`` -> ``[n, prod(*)]`` (``[n]`` -> ``[n, 1]``)
    """
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))
