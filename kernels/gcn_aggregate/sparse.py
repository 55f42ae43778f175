"""GCN aggregation through ``torch.sparse.mm``: edge weights ``dinv[row] dinv[col]``, then the self loop."""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR
from ..spmm.sparse import SparseSpmm
from ..spmm.sparse import why_not as _spmm_why_not


def why_not(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None = None, relu: bool = False,
            add_self_loops: bool = True) -> str | None:
    return _spmm_why_not(csr, x)


def gcn_aggregate(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None = None, relu: bool = False,
                  add_self_loops: bool = True) -> Tensor:
    """``out[i] = dinv[i] * (sum_{e in row i} dinv[col e] x[col e] + dinv[i] x[i]) + bias``, then optional ReLU.

    Shapes:
        x ``[n_cols, F]``, dinv ``[n_cols]``, bias ``[F]`` -> ``[n_rows, F]``
    """
    n = csr.n_rows
    d = dinv.detach().to(x.dtype)  # [n_cols]
    weight = d[csr.row] * d[csr.col]  # [nnz]
    out = SparseSpmm.apply(csr, x.contiguous(), weight, "sum")  # [n_rows, F]
    if add_self_loops:
        out = out + (d[:n] * d[:n]).unsqueeze(1) * x[:n]
    if bias is not None:
        out = out + bias
    return torch.relu(out) if relu else out
