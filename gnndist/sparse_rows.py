"""``SparseRows``: mostly-zero input features as a first linear map takes them, ``O(nnz x H)`` instead of ``n x F x H``.

Bag-of-words features (Cora, Coauthor CS, Amazon, Flickr: 0.4-2 % of the cells) make a first layer's
``X W^T`` a dense GEMM over zeros: on Coauthor CS (F = 6,805) it was 96 % of a 2-layer SAGE epoch.
``X W^T`` is an SpMM: the rows of ``X`` are a CSR over the ``F`` feature columns, its values the
features, and ``W^T`` ``[F, H]`` the dense operand, so :func:`gnndist.kernels.spmm` computes it (fp32 sums
for half inputs, Triton on CUDA, ``torch.sparse`` on the CPU) and its backward, ``X^T grad``, is the weight
gradient on the CSR's cached transpose. The features need no gradient: none is computed.

The graph hands a model its features in this form where the model asks for it (``graph.dropout(x, p,
key, sparse=True)`` or :meth:`DistGraph.input_rows <gnndist.graph.DistGraph.input_rows>`) and the
features' density is under :data:`SPARSE_FEATURES` (decided once per job over every rank). A linear map
takes them: ``F.linear(rows, W, b)`` (so an ``nn.Linear``) and ``rows @ W^T``; every other op is refused
in one line naming it (:meth:`SparseRows.to_dense` gives the dense rows). Each output row is its own sum
over that row's nonzeros, so the result does not depend on how rows are split over ranks; the weight
gradient sums over a rank's rows and then over ranks, as the dense one does.

Here too is what the graph decides about its input features at load, over every rank alike: their
normalisation (:func:`normalize_rows`) and their density (:func:`feature_density`); and dropout at the nonzero
cells alone (:func:`dropout_rows`), the dense mask's cells at ``O(nnz)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from gnndist.kernels import CSR, KernelSettings, spmm
from gnndist.kernels.dropout.reference import apply_dropout, cell_draws, mask_threshold

if TYPE_CHECKING:
    from gnndist.dist.grid import ProcessGrid

# features whose nonzeros are under this share of the cells go to a first linear map as SparseRows: measured on
# 2 CPU threads (python benchmarks/sparse_input.py; Coauthor CS's 18,333 x 6,805 at hidden 256), the map's forward +
# weight gradient takes 0.13x the dense time at 0.875 % (Coauthor CS's own density), 0.67x at 5 %, 1.44x at 10 %
SPARSE_FEATURES = 0.05


@dataclass(frozen=True, eq=False)
class SparseRows:
    """Rows of a mostly-zero matrix: the pattern ``csr`` (``[n_rows, F]``) and its ``values``.

    Args:
        csr: the nonzero cells, rows in order, columns ascending in each row.
        values: the cells' values (after dropout: the dense mask's cells, scaled).
        kernel: the kernel settings the product dispatches with (the graph's).

    Shapes:
        csr ``[n_rows, F]``, values ``[nnz]``
    """

    csr: CSR
    values: Tensor
    kernel: KernelSettings = KernelSettings()

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.csr.n_rows, self.csr.num_cols))

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    def dim(self) -> int:
        return 2

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def with_values(self, values: Tensor) -> SparseRows:
        """The same pattern holding ``values``."""
        return SparseRows(self.csr, values, self.kernel)

    def to_dense(self) -> Tensor:
        """The rows as a dense ``[n_rows, F]`` tensor."""
        out = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        out[self.csr.row.long(), self.csr.col.long()] = self.values
        return out

    def matmul(self, w: Tensor) -> Tensor:
        """``rows @ w`` as an SpMM over the nonzeros; differentiable in ``w`` (``X^T grad``), not in the rows.

        Under autocast the product runs in the autocast dtype, as a dense ``matmul`` would (fp32 sums).

        Shapes:
            w ``[F, H]`` -> ``[n_rows, H]``
        """
        if w.dim() != 2 or w.shape[0] != self.csr.num_cols:
            raise ValueError(f"SparseRows {tuple(self.shape)} @ {tuple(w.shape)}: the inner dims differ")
        dev = w.device.type
        if torch.is_autocast_enabled(dev) and w.is_floating_point():
            w = w.to(torch.get_autocast_dtype(dev))
        return spmm(self.csr, w, self.values.to(w.dtype), impl=self.kernel.impl, tune=self.kernel.tune)

    def __matmul__(self, w: Tensor) -> Tensor:
        return self.matmul(w)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            return _linear(*args, **kwargs)
        if func in (torch.matmul, torch.Tensor.__matmul__, torch.mm) and isinstance(args[0], SparseRows):
            return args[0].matmul(args[1])
        name = getattr(func, "__name__", str(func))
        raise TypeError(f"{name}: sparse input features (SparseRows) go to linear maps only (F.linear, @); "
                        "a layer that does more with its input asks for dense rows (graph.dropout without sparse=True)")


def _linear(x: SparseRows, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear`` of sparse rows: ``x W^T + b``.

    Shapes:
        x ``[n, F]``, weight ``[H, F]``, bias ``[H]`` -> ``[n, H]``
    """
    out = x.matmul(weight.t())  # [n, H]
    return out if bias is None else out + bias.to(out.dtype)


def rows_of(x: Tensor, kernel: KernelSettings) -> SparseRows:
    """The nonzero cells of a dense ``[n, F]`` matrix as :class:`SparseRows` (int32 indices where they fit)."""
    rows, cols = x.nonzero(as_tuple=True)  # row-major: rows ascending, columns ascending in each row
    dtype = torch.int32 if rows.numel() < 2**31 else torch.int64
    counts = torch.bincount(rows, minlength=x.shape[0])
    rowptr = torch.zeros(x.shape[0] + 1, dtype=dtype, device=x.device)
    rowptr[1:] = counts.cumsum(0)
    return SparseRows(CSR(rowptr, cols.to(dtype), x.shape[1]), x[rows, cols], kernel)


def normalize_rows(x: Tensor, grid: ProcessGrid) -> Tensor:
    """Rows scaled to sum 1 (Kipf & Welling) unless some feature on some rank is negative; exact for any P.

    Collective: whether any feature is negative is decided over every rank (row sums of
    signed features are no scale, so those are left alone on every rank alike).
    """
    negative = grid.all_reduce_((x < 0).any().double().view(1))  # [1]
    if negative.item() > 0:
        return x
    return x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)  # per node: the same for every partition


def feature_density(x: Tensor, grid: ProcessGrid) -> float:
    """The share of nonzero cells in the features over every rank (collective: one all-reduce, the same on all)."""
    counts = torch.tensor([float(torch.count_nonzero(x)), float(x.numel())], dtype=torch.float64, device=x.device)
    nonzero, cells = grid.all_reduce_(counts).tolist()
    return nonzero / cells if cells else 1.0


def dropout_rows(rows: SparseRows, keys: Tensor, p: float) -> SparseRows:
    """Dropout of mostly-zero rows at their nonzero cells alone: the dense mask's cells, ``O(nnz)``.

    Shapes:
        rows ``[n, F]``, keys ``[n]`` (:func:`~gnndist.kernels.dropout.reference.node_keys` of the rows' nodes)
    """
    drop = cell_draws(keys[rows.csr.row.long()], rows.csr.col, rows.shape[1]) < mask_threshold(p)  # [nnz]
    return rows.with_values(apply_dropout(rows.values, drop, p))
