"""Segment max in plain PyTorch: ``scatter_reduce`` max, the first edge reaching it, then ``gather``.

Gathering through the arg-max (not ``scatter_reduce``'s own backward, which splits the
gradient among ties) sends the whole gradient to one edge: the first in the row.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR


def segment_max(csr: CSR, x: Tensor) -> Tensor:
    """``out[i, f] = max_{e in row i} x[col e, f]``; rows without edges give 0.

    Shapes:
        x ``[n_cols, F]`` -> ``[n_rows, F]``
    """
    n_rows, nnz, feat = csr.n_rows, csr.nnz, x.shape[1]
    if nnz == 0:  # zeros that still depend on x: a backward through them reaches x (and any exchange before it)
        return x.new_zeros((n_rows, feat)) + x[:0].sum(0)
    row, col = csr.row.long(), csr.col.long()
    vals = x.detach()[col]  # [nnz, F]
    index = row.unsqueeze(1).expand(-1, feat)  # [nnz, F]
    row_max = vals.new_full((n_rows, feat), float("-inf")).scatter_reduce(0, index, vals, "amax")
    edge = torch.arange(nnz, device=x.device).unsqueeze(1).expand(-1, feat)  # [nnz, F]
    first = torch.where(vals == row_max[row], edge, nnz)
    arg = torch.full((n_rows, feat), nnz, device=x.device).scatter_reduce(0, index, first, "amin")  # [n_rows, F]
    empty = arg == nnz
    src = col[arg.clamp(max=nnz - 1)]  # [n_rows, F] source node of the arg-max
    return torch.where(empty, 0, x.gather(0, src))
