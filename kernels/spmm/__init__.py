"""SpMM kernels: reference.py (plain PyTorch), sparse.py (torch.sparse.mm), and the Triton path:

    triton_kernel.py  the @triton.jit kernels and their launcher ``spmm_launch``
    triton_plan.py    the segment plan: rows cut into balanced segments, grouped by length
    triton_tiles.py   the tiles per width, their options and their measurement per graph
    triton.py         the autograd.Function and ``spmm``, the entry point dispatch loads

The backward's ``grad_x = A^T grad`` is an SpMM of its own, on the cached transpose (unweighted:
its pattern alone, ``CSR.transposed``, which is the CSR itself when it is symmetric):
:func:`transposed_product` sends it through the dispatcher, so on CUDA it is timed and
chosen apart from the forward (``A^T`` has other row lengths: a hub column of ``A`` is a
hub row of ``A^T``). A forward that was forced to one path keeps that path backwards.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import dispatch
from ..csr import CSR


def transposed_weights(csr: CSR, edge_weight: Tensor | None, mean: bool, dtype: torch.dtype) -> Tensor | None:
    """Edge values of ``A^T`` for the backward of ``spmm(csr, x, edge_weight, "mean" if mean else "sum")``.

    ``w[perm]``, times ``1/deg(row)`` for ``mean``; None for the unweighted sum. ``dtype`` is the
    gradient's: the degree factor is computed in fp32, or fp64 for fp64 gradients (cached when
    unweighted).

    Shapes:
        edge_weight ``[nnz]`` or ``[nnz, H]`` -> ``[nnz]`` or ``[nnz, H]`` in ``A^T``'s edge order
    """
    _, perm = csr.transpose()
    if not mean:
        return None if edge_weight is None else edge_weight[perm]
    acc = torch.promote_types(torch.float32, dtype)
    if edge_weight is None:
        return csr.cached(("mean_weights_t", acc), lambda: csr.mean_scale(acc, per_edge=True)[perm])
    w = edge_weight.to(torch.promote_types(acc, edge_weight.dtype))
    return (w * csr.mean_scale(acc, per_edge=True).reshape((-1,) + (1,) * (w.dim() - 1)))[perm]


def transposed_product(csr: CSR, grad: Tensor, edge_weight: Tensor | None, reduce: str,
                       impl: str | None, tune: bool) -> Tensor:
    """``grad_x = A^T grad`` for the backward of ``spmm(csr, x, edge_weight, reduce)``.

    ``impl``: the path the forward was forced to (it is kept), or None to let the
    dispatcher choose for ``A^T`` on its own (measured on CUDA; ``tune`` as the forward's).

    Shapes:
        grad ``[n_rows, F]`` or ``[n_rows, H, D]`` -> ``[n_cols, F]`` or ``[n_cols, H, D]``
    """
    grad = grad.contiguous()
    if edge_weight is None and (reduce == "sum" or grad.dtype in (torch.float32, torch.float64)):
        # unweighted: the pattern of A^T alone (A itself when symmetric), no value per entry;
        # mean scales the gradient's rows first, the same products 1/deg(i) * grad[i] as per-edge values
        if reduce == "mean":
            scale = csr.mean_scale(grad.dtype)  # [n_rows]
            grad = grad * scale.reshape((-1,) + (1,) * (grad.dim() - 1))
        return dispatch.run("spmm", csr.transposed(), grad, None, "sum", impl=impl, tune=tune)
    csr_t, _ = csr.transpose()
    w_t = transposed_weights(csr, edge_weight, reduce == "mean", grad.dtype)
    return dispatch.run("spmm", csr_t, grad, w_t, "sum", impl=impl, tune=tune)
