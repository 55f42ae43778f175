"""SpMM in plain PyTorch: gather the source rows, scale, ``index_add_`` into the destination rows.

The simplest correct form, differentiated by PyTorch's autograd; every other
implementation is tested against it. Low-precision inputs accumulate in fp32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR


def spmm(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """``out[i] = sum_{e in row i} w[e] * x[col[e]]`` (``reduce="mean"``: divided by the row's degree).

    Shapes:
        x ``[n_cols, F]`` or ``[n_cols, H, D]``; edge_weight ``[nnz]`` or ``[nnz, H]``;
        out ``[n_rows, F]`` or ``[n_rows, H, D]``
    """
    acc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    msg = acc[csr.col]  # [nnz, *feat]
    if edge_weight is not None:
        w = edge_weight.to(acc.dtype)
        msg = msg * w.reshape(w.shape + (1,) * (msg.dim() - w.dim()))
    out = acc.new_zeros((csr.n_rows,) + tuple(x.shape[1:])).index_add_(0, csr.row, msg)  # [n_rows, *feat]
    if reduce == "mean":
        out = out / csr.mean_divisor(acc.dtype).reshape((-1,) + (1,) * (out.dim() - 1))
    return out.to(x.dtype)
