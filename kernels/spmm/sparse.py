"""SpMM through ``torch.sparse.mm`` on a CSR tensor (MKL on CPU, cuSPARSE on CUDA).

The fastest plain-PyTorch path on CPU, 5-10x ahead of ``index_add_`` /
``scatter_reduce`` / ``segment_reduce`` because it never materialises the ``[nnz, F]``
messages (``python benchmarks/kernels.py`` prints the comparison). Measured on
Coauthor CS (18,333 nodes, 163,788 edges), 2 CPU threads, ms per call:

    F     sparse.mm(csr)  sparse.mm(coo)  index_add_  scatter_reduce  segment_reduce
    16         4.4            28.8           67.5          79.7            51.8
    64        32.0            38.7          174.6         170.6            99.5
    256       15.3            32.2          193.2         249.4           224.9

Backward: ``grad_x = A^T grad`` on the cached transposed CSR, dispatched on its own
(``transposed_product``); ``grad_w[e] = <grad[row e], x[col e]>``.

bf16 / fp16 rows are multiplied in fp32 (MKL has no half kernel; on CUDA it makes the accumulation
fp32 by construction) and the result rounded to their dtype once, :data:`HALF_COLUMNS` columns at a
time: the transient fp32 copy of the rows and of the output is ``[n_cols + n_rows, 16]`` x 4 B at any F
(whole, it is ``[n_cols + n_rows, F]`` x 4 B, as large as the half activations of the layer it serves; on
the 1M-node GCN of ``benchmarks/README.md``, "Half precision: memory", the rank's peak was elsewhere and
did not move). Each output column is its own sum, so the chunks change no bit. The Triton path reads
half rows directly.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from .. import dispatch
from ..csr import CSR
from . import transposed_product

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)  # half: multiplied in fp32
_HALF = (torch.float16, torch.bfloat16)
HALF_COLUMNS = 16  # columns of half rows multiplied in fp32 at a time (MKL is as fast at 16 as at 64: the table)


def why_not(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> str | None:
    if x.dtype not in _DTYPES:
        return f"torch.sparse.mm has no {x.dtype} kernel"
    if x.dim() != 2:
        return f"x must be [n_cols, F], got {x.dim()} dims"
    if edge_weight is not None and edge_weight.dim() != 1:
        return "per-head edge weights are not supported"
    return None


def sparse_matrix(csr: CSR, values: Tensor) -> Tensor:
    """``csr`` as a ``torch.sparse_csr_tensor`` holding ``values`` (no copy of the indices)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(csr.rowptr, csr.col, values, (csr.n_rows, csr.num_cols),
                                       check_invariants=False)


# entries per call of torch.sparse.mm on the CPU: its transient copies (MKL's, the ones made whole) stay at ~32 MiB
BLOCK_ENTRIES = 2**22


def row_blocks(csr: CSR, values: Tensor) -> list[tuple[int, Tensor]]:
    """``csr`` with ``values`` as ``torch.sparse_csr_tensor`` blocks of whole rows, ``(first row, block)``.

    On the CPU a block holds about :data:`BLOCK_ENTRIES` entries: a row's products are the same in a block
    as in the whole matrix (each output row is its own sum), and one call's transient copies, 8 B per
    entry, are a block's. Elsewhere (cuSPARSE makes no such copies) one block, the whole matrix.
    """
    if csr.device.type != "cpu" or csr.nnz <= BLOCK_ENTRIES:
        return [(0, sparse_matrix(csr, values))]
    cuts = torch.searchsorted(csr.rowptr, torch.arange(0, csr.nnz, BLOCK_ENTRIES, dtype=csr.rowptr.dtype))
    starts = sorted(set(int(r) for r in cuts.clamp(max=csr.n_rows - 1)) | {0})
    ends = starts[1:] + [csr.n_rows]
    blocks = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        for a, b in zip(starts, ends):
            lo, hi = int(csr.rowptr[a]), int(csr.rowptr[b])
            blocks.append((a, torch.sparse_csr_tensor(csr.rowptr[a : b + 1] - lo, csr.col[lo:hi], values[lo:hi],
                                                      (b - a, csr.num_cols), check_invariants=False)))
    return blocks


def edge_values(csr: CSR, edge_weight: Tensor | None, reduce: str, dtype: torch.dtype) -> Tensor:
    """Effective weight of every edge: ``w[e]``, divided by the row degree for ``reduce="mean"``. ``[nnz]``."""
    if edge_weight is None:  # one 1 for every entry: a broadcast scalar on the CPU (MKL reads it), no [nnz] array
        if csr.device.type == "cpu":
            values = torch.ones((), dtype=dtype).expand(csr.nnz)
        else:
            values = csr.cached(("ones", dtype), lambda: torch.ones(csr.nnz, dtype=dtype, device=csr.device))
    else:
        values = edge_weight.to(dtype)
    if reduce == "mean":
        values = values * csr.mean_scale(dtype, per_edge=True)  # [nnz]
    return values


def _product(blocks: list[tuple[int, Tensor]], x: Tensor, acc: torch.dtype, n_rows: int) -> Tensor:
    """``A @ x`` in ``x``'s dtype, ``A`` as :func:`row_blocks`; half rows multiplied in fp32, :data:`HALF_COLUMNS`
    columns at a time (each chunk of ``x`` made fp32 once, for every block)."""
    if len(blocks) == 1 and x.dtype not in _HALF:
        return torch.sparse.mm(blocks[0][1], x)  # [n_rows, F]
    out = x.new_empty((n_rows, x.shape[1]))  # [n_rows, F]
    step = HALF_COLUMNS if x.dtype in _HALF else max(x.shape[1], 1)
    for j in range(0, x.shape[1], step):
        cols = x[:, j : j + step].to(acc).contiguous() if x.dtype in _HALF else x  # [n_cols, <= step]
        for a, matrix in blocks:  # a block's rows at a time: the call's own copies are of the block, not of A
            out[a : a + matrix.shape[0], j : j + step] = torch.sparse.mm(matrix, cols)
    return out


class SparseSpmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
        acc = torch.float32 if x.dtype in _HALF else x.dtype  # the accumulation's dtype
        values = edge_values(csr, edge_weight, reduce, acc)  # [nnz]
        ctx.csr, ctx.reduce, ctx.impl, ctx.tune = csr, reduce, dispatch.pinned(), dispatch.tuning()
        ctx.save_for_backward(x if ctx.needs_input_grad[2] else None, edge_weight)  # x: for the weights' gradient only
        if edge_weight is None and reduce == "sum":
            blocks = csr.cached(("sparse", acc), lambda: row_blocks(csr, values))
        else:
            blocks = row_blocks(csr, values)
        return _product(blocks, x, acc, csr.n_rows)  # [n_rows, F]

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, edge_weight = ctx.saved_tensors
        csr: CSR = ctx.csr
        grad = grad.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:  # A^T grad: its own dispatch (sparse when the forward was forced)
            grad_x = transposed_product(csr, grad, edge_weight, ctx.reduce, ctx.impl, ctx.tune)  # [n_cols, F]
        if ctx.needs_input_grad[2]:
            acc = torch.promote_types(grad.dtype, torch.float32)
            grad_w = (grad[csr.row].to(acc) * x[csr.col].to(acc)).sum(-1)  # [nnz]
            if ctx.reduce == "mean":
                grad_w = grad_w / csr.mean_divisor(grad_w.dtype, per_edge=True)
        return None, grad_x, grad_w, None


def spmm(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """``out[i] = sum_{e in row i} w[e] * x[col[e]]`` (``reduce="mean"``: divided by the row's degree).

    Shapes:
        x ``[n_cols, F]``, edge_weight ``[nnz]`` -> ``[n_rows, F]``
    """
    return SparseSpmm.apply(csr, x.contiguous(), edge_weight, reduce)
