"""SpMM kernels: reference.py (plain PyTorch), triton.py, sparse.py (torch.sparse.mm).

The backward's ``grad_x = A^T grad`` is an SpMM of its own, on the cached transpose:
:func:`transposed_product` sends it through the dispatcher, so on CUDA it is timed and
chosen apart from the forward (``A^T`` has other row lengths: a hub column of ``A`` is a
hub row of ``A^T``). A forward that was forced to one path keeps that path backwards.
"""

from __future__ import annotations

import torch
from torch import Tensor

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

    def inv_deg() -> Tensor:  # [nnz]: 1 / degree of every edge's row
        return (1.0 / csr.in_degree().clamp(min=1).to(acc))[csr.row]

    if edge_weight is None:
        return csr.cached(("mean_weights_t", acc), lambda: inv_deg()[perm])
    w = edge_weight.to(torch.promote_types(acc, edge_weight.dtype))
    return (w * inv_deg().reshape((-1,) + (1,) * (w.dim() - 1)))[perm]


def transposed_product(csr: CSR, grad: Tensor, edge_weight: Tensor | None, reduce: str,
                       impl: str | None) -> Tensor:
    """``grad_x = A^T grad`` for the backward of ``spmm(csr, x, edge_weight, reduce)``.

    ``impl``: the path the forward was forced to (it is kept), or None to let the
    dispatcher choose for ``A^T`` on its own (measured on CUDA).

    Shapes:
        grad ``[n_rows, F]`` or ``[n_rows, H, D]`` -> ``[n_cols, F]`` or ``[n_cols, H, D]``
    """
    from .. import dispatch

    csr_t, _ = csr.transpose()
    w_t = transposed_weights(csr, edge_weight, reduce == "mean", grad.dtype)
    return dispatch.run("spmm", csr_t, grad.contiguous(), w_t, "sum", impl=impl)
