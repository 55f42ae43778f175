"""SDDMM in plain PyTorch: gather both endpoints of every edge and combine them."""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR


def sddmm(csr: CSR, a: Tensor, b: Tensor, op: str = "add") -> Tensor:
    """``op="add"``: ``out[e] = a[row e] + b[col e]``; ``op="dot"``: ``out[e] = <a[row e], b[col e]>`` over the
    last dim.

    Shapes:
        add: a ``[n_rows, H]``, b ``[n_cols, H]`` -> ``[nnz, H]``
        dot: a ``[n_rows, H, D]``, b ``[n_cols, H, D]`` -> ``[nnz, H]``; a ``[n_rows, D]`` -> ``[nnz]``
    """
    dtype = a.dtype
    if dtype in (torch.float16, torch.bfloat16):
        a, b = a.float(), b.float()
    if op == "add":
        out = a[csr.row] + b[csr.col]  # [nnz, H]
    else:
        out = (a[csr.row] * b[csr.col]).sum(-1)  # [nnz, H] or [nnz]
    return out.to(dtype)
