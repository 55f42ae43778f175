"""GCN aggregation in plain PyTorch, unfused: scale, gather, ``index_add_``, self loop, scale, bias, ReLU."""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR


def gcn_aggregate(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None = None, relu: bool = False,
                  add_self_loops: bool = True) -> Tensor:
    """``out[i] = dinv[i] * (sum_{e in row i} dinv[col e] x[col e] + dinv[i] x[i]) + bias``, then optional ReLU.

    ``dinv`` is a constant (no gradient). Row ``i`` is column ``i`` for ``i < n_rows``.

    Shapes:
        x ``[n_cols, F]``, dinv ``[n_cols]``, bias ``[F]`` -> ``[n_rows, F]``
    """
    n = csr.n_rows
    acc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    d = dinv.detach().to(acc.dtype)  # [n_cols]
    msg = acc[csr.col] * d[csr.col].unsqueeze(1)  # [nnz, F]
    agg = acc.new_zeros((n, x.shape[1])).index_add_(0, csr.row, msg)  # [n_rows, F]
    if add_self_loops:
        agg = agg + d[:n].unsqueeze(1) * acc[:n]
    out = d[:n].unsqueeze(1) * agg
    if bias is not None:
        out = out + bias.to(acc.dtype)
    if relu:
        out = torch.relu(out)
    return out.to(x.dtype)
