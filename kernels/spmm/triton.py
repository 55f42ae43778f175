"""SpMM in Triton: the autograd function and the entry point the dispatcher loads as ``"triton"``.

The kernel and its launcher are in ``triton_kernel.py``, the segment plan in
``triton_plan.py``, the tiles and their measurement in ``triton_tiles.py``.

Backward: ``grad_x = A^T grad`` is dispatched as an SpMM of its own on the cached transpose
(``spmm.transposed_product``: this kernel with ``A^T``'s own plan, or cuSPARSE where that was
measured faster for ``A^T``); ``grad_w`` is an SDDMM.

Status: correct compiled on an H200 (the kernel tests). Timed there against cuSPARSE
(benchmarks/README.md, "On an H200"): faster on the 2M-node graph at F = 128 (4.3 vs 5.9 ms fp32,
4.1 vs 29.6 ms bf16), behind in some shapes of a small graph; ``gnndist.kernels.dispatch`` tunes
this path (:func:`tune`), times it against cuSPARSE on first use and keeps the faster, so the model
never runs the slower path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import dispatch, triton_common
from ..csr import CSR, rows2d
from ..sddmm.triton import sddmm_dot_launch
from . import transposed_product, triton_kernel, triton_tiles


def tune_tiles(csr: CSR, x: Tensor, weight: Tensor | None = None, mean: bool = False, head_dim: int = 0,
               timer: Callable[[Callable[[], object]], float] | None = None) -> tuple:
    """The fastest tiles of ``triton_kernel.spmm_launch`` for these inputs (``triton_tiles.search``), kept on ``csr``.

    Later launches on inputs like these use them.

    Shapes:
        x ``[n_cols, F]`` or ``[n_cols, H, D]``
    """
    x2 = rows2d(x)  # [n_cols, F]

    def launch(tiles: tuple) -> Tensor:
        return triton_kernel.spmm_launch(csr, x2, weight, mean, head_dim, tiles=tiles)

    return triton_tiles.search(csr, x2, weight, mean, head_dim, launch, timer)


def tune(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> None:
    """Dispatch's hook before this path is timed (``tune=True``): measure the tiles for these inputs (CUDA only)."""
    if x.device.type != "cuda" or triton_common.INTERPRETED:
        return
    head_dim = x.shape[2] if x.dim() == 3 else 0
    with torch.no_grad():
        tune_tiles(csr, x.detach(), None if edge_weight is None else edge_weight.detach(), reduce == "mean", head_dim)


class TritonSpmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
        head_dim = x.shape[2] if x.dim() == 3 else 0
        # the output itself, never a view of one: a caller may modify it in place (GCN's scale and self loop)
        out = x.new_empty((csr.n_rows,) + tuple(x.shape[1:]))  # [n_rows, F] or [n_rows, H, D]
        triton_kernel.spmm_launch(csr, rows2d(x), edge_weight, reduce == "mean", head_dim, out=rows2d(out))
        ctx.csr, ctx.reduce, ctx.impl, ctx.tune = csr, reduce, dispatch.pinned(), dispatch.tuning()
        ctx.save_for_backward(x if ctx.needs_input_grad[2] else None, edge_weight)  # x: for the weights' gradient only
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, edge_weight = ctx.saved_tensors
        csr: CSR = ctx.csr
        grad = grad.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:  # A^T grad: its own dispatch (triton when the forward was forced)
            # [n_cols, F] or [n_cols, H, D]
            grad_x = transposed_product(csr, grad, edge_weight, ctx.reduce, ctx.impl, ctx.tune)
        if ctx.needs_input_grad[2]:
            grad_w = sddmm_dot_launch(csr, grad, x)  # [nnz] or [nnz, H]
            if ctx.reduce == "mean":
                scale = csr.mean_scale(torch.float32, per_edge=True)  # [nnz]
                grad_w = grad_w * scale.reshape((-1,) + (1,) * (grad_w.dim() - 1)).to(grad_w.dtype)
            grad_w = grad_w.to(edge_weight.dtype)
        return None, grad_x, grad_w, None


def why_not(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> str | None:
    return triton_common.why_not(x, edge_weight)


def spmm(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """``out[i] = sum_{e in row i} w[e] * x[col[e]]`` (``reduce="mean"``: divided by the row's degree).

    Shapes:
        x ``[n_cols, F]`` or ``[n_cols, H, D]``; edge_weight ``[nnz]`` or ``[nnz, H]``;
        out ``[n_rows, F]`` or ``[n_rows, H, D]``
    """
    return TritonSpmm.apply(csr, x, edge_weight, reduce)
