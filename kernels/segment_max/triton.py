"""Segment max in Triton: one program per row and block of features, keeping the max and its edge.

The arg-max is the row's first edge reaching the max, as in the reference, whatever the
tile size: values are compared as stored (their exact fp32 upcast), a tile's arg-max is
the smallest edge index among its entries equal to the tile max, and a later tile
replaces the running max only if strictly greater. The first tile is always taken, so
a row of ``-inf`` gives ``-inf``. The kernel returns the arg-max's source node; backward
scatters the gradient there, accumulating in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import triton_common
from ..csr import CSR


@triton.autotune(configs=triton_common.row_configs(), key=["F"],
                 prune_configs_by={"early_config_prune": triton_common.prune_row_configs})
@triton.jit
def _segment_max_kernel(ROWPTR, COL, ROW_ORDER, X, OUT, ARG, F, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    row = tl.load(ROW_ORDER + tl.program_id(0)).to(tl.int64)
    start = tl.load(ROWPTR + row).to(tl.int64)
    end = tl.load(ROWPTR + row + 1).to(tl.int64)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f < F
    best = tl.full([BLOCK_F], float("-inf"), dtype=tl.float32)
    arg = tl.full([BLOCK_F], -1, dtype=tl.int64)  # source node of the max; -1: none yet
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        e_mask = e < end
        src = tl.load(COL + e, mask=e_mask, other=0).to(tl.int64)  # [BLOCK_E]
        mask = e_mask[:, None] & f_mask[None, :]
        v = tl.load(X + src[:, None] * F + f[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        tile_best = tl.max(v, axis=0)  # [BLOCK_F]
        hit = (v == tile_best[None, :]) & mask  # [BLOCK_E, BLOCK_F]
        tile_e = tl.min(tl.where(hit, e[:, None], end), axis=0)  # first edge reaching the tile max
        tile_src = tl.sum(tl.where(e[:, None] == tile_e[None, :], src[:, None], 0), axis=0)
        better = (tile_best > best) | (arg < 0)  # strict: an earlier tile keeps its tie
        best = tl.where(better, tile_best, best)
        arg = tl.where(better, tile_src, arg)
    found = arg >= 0
    tl.store(OUT + row * F + f, tl.where(found, best, 0.0).to(OUT.dtype.element_ty), mask=f_mask)
    tl.store(ARG + row * F + f, arg, mask=f_mask)


def segment_max_launch(csr: CSR, x: Tensor) -> tuple[Tensor, Tensor]:
    """Max and arg-max source node (``-1`` for rows without edges). Shapes: x ``[n_cols, F]`` -> 2 x ``[n_rows, F]``."""
    x = x.contiguous()
    feat = x.shape[1]
    out = torch.zeros((csr.n_rows, feat), dtype=x.dtype, device=x.device)
    arg = torch.full((csr.n_rows, feat), -1, dtype=torch.int64, device=x.device)
    if out.numel() and csr.nnz:
        def grid(meta):
            return (csr.n_rows, triton.cdiv(feat, meta["BLOCK_F"]))

        _segment_max_kernel[grid](csr.rowptr, csr.col, csr.row_order(), x, out, arg, feat)
    return out, arg


class TritonSegmentMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor) -> Tensor:
        out, arg = segment_max_launch(csr, x)
        ctx.n_cols = x.shape[0]
        ctx.save_for_backward(arg)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (arg,) = ctx.saved_tensors
        found = arg >= 0
        grad_x = grad.new_zeros((ctx.n_cols, grad.shape[1]), dtype=torch.float32)  # [n_cols, F]
        grad_x.scatter_add_(0, arg.clamp(min=0), torch.where(found, grad.float(), 0))
        return None, grad_x.to(grad.dtype)


def why_not(csr: CSR, x: Tensor) -> str | None:
    if x.dim() != 2:
        return f"x must be [n_cols, F], got {x.dim()} dims"
    return triton_common.why_not(x)


def segment_max(csr: CSR, x: Tensor) -> Tensor:
    """``out[i, f] = max_{e in row i} x[col e, f]``; rows without edges give 0; gradient to the arg-max.

    Shapes:
        x ``[n_cols, F]`` -> ``[n_rows, F]``
    """
    return TritonSegmentMax.apply(csr, x)
