"""Segment softmax in plain PyTorch: ``scatter_reduce`` max, shifted ``exp``, ``index_add_`` sum."""

from __future__ import annotations

import torch
from torch import Tensor

from ..csr import CSR


def segment_softmax(csr: CSR, scores: Tensor) -> Tensor:
    """Softmax of every row's edge scores: ``out[e] = exp(s[e]) / sum_{e' in row e} exp(s[e'])``.

    The row maximum is subtracted first (numerically stable); it is detached, which
    changes nothing in the gradient because softmax does not depend on the shift.

    Shapes:
        scores ``[nnz, H]`` or ``[nnz]`` -> same shape
    """
    s = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    row = csr.row.long()
    index = row.reshape((-1,) + (1,) * (s.dim() - 1)).expand_as(s)  # [nnz, H]
    shape = (csr.n_rows,) + tuple(s.shape[1:])
    row_max = s.new_full(shape, float("-inf")).scatter_reduce(0, index, s.detach(), "amax")  # [n_rows, H]
    ex = (s - row_max[row]).exp()  # [nnz, H]
    denom = s.new_zeros(shape).index_add_(0, row, ex)  # [n_rows, H]
    return (ex / denom[row]).to(scores.dtype)
