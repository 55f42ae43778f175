"""Fused GCN aggregation in Triton: normalisation, self loop, bias and ReLU in one pass over the edges.

One program per destination row and block of features (heaviest rows first). Backward
runs the same kernel on the cached ``A^T``: ``grad_x[j] = dinv[j] (sum_{e: col e = j}
dinv[row e] g[row e] + dinv[j] g[j])`` with ``g`` the output gradient after the ReLU mask.
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
def _gcn_kernel(ROWPTR, COL, ROW_ORDER, X, DINV, BIAS, OUT, F, n_self,
                HAS_BIAS: tl.constexpr, RELU: tl.constexpr, SELF_LOOPS: tl.constexpr,
                BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    row = tl.load(ROW_ORDER + tl.program_id(0)).to(tl.int64)
    start = tl.load(ROWPTR + row).to(tl.int64)
    end = tl.load(ROWPTR + row + 1).to(tl.int64)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f < F
    acc = tl.zeros([BLOCK_E, BLOCK_F], dtype=tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        e_mask = e < end
        src = tl.load(COL + e, mask=e_mask, other=0).to(tl.int64)
        d_src = tl.load(DINV + src, mask=e_mask, other=0.0).to(tl.float32)  # [BLOCK_E]
        mask = e_mask[:, None] & f_mask[None, :]
        v = tl.load(X + src[:, None] * F + f[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += v * d_src[:, None]
    total = tl.sum(acc, axis=0)  # [BLOCK_F]
    d_row = tl.load(DINV + row).to(tl.float32)
    if SELF_LOOPS:
        has_self = (row + tl.zeros([BLOCK_F], dtype=tl.int64)) < n_self  # [BLOCK_F], all equal
        x_self = tl.load(X + row * F + f, mask=f_mask & has_self, other=0.0).to(tl.float32)
        total += d_row * x_self
    out = d_row * total
    if HAS_BIAS:
        out += tl.load(BIAS + f, mask=f_mask, other=0.0).to(tl.float32)
    if RELU:
        out = tl.maximum(out, 0.0)
    tl.store(OUT + row * F + f, out.to(OUT.dtype.element_ty), mask=f_mask)


def gcn_launch(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None, relu: bool, add_self_loops: bool,
               n_self: int) -> Tensor:
    """Launch :func:`_gcn_kernel`; rows ``i < n_self`` add the self loop ``dinv[i] x[i]``.

    Shapes:
        x ``[*, F]``, dinv ``[>= max(n_rows, num_cols)]`` -> ``[n_rows, F]``
    """
    x = x.contiguous()
    feat = x.shape[1]
    out = torch.empty((csr.n_rows, feat), dtype=x.dtype, device=x.device)  # [n_rows, F]
    if out.numel():
        def grid(meta):
            return (csr.n_rows, triton.cdiv(feat, meta["BLOCK_F"]))

        _gcn_kernel[grid](csr.rowptr, csr.col, csr.row_order(), x, dinv, bias if bias is not None else x, out,
                          feat, n_self, HAS_BIAS=bias is not None, RELU=relu, SELF_LOOPS=add_self_loops)
    return out


class TritonGcnAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None, relu: bool,
                add_self_loops: bool) -> Tensor:
        dinv = dinv.detach().contiguous()
        out = gcn_launch(csr, x, dinv, bias, relu, add_self_loops, csr.n_rows)
        ctx.csr, ctx.relu, ctx.add_self_loops, ctx.x_dtype = csr, relu, add_self_loops, x.dtype
        ctx.save_for_backward(dinv, out if relu else None)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        dinv, out = ctx.saved_tensors
        csr: CSR = ctx.csr
        if ctx.relu:
            grad = torch.where(out > 0, grad, 0)
        grad_x = grad_bias = None
        if ctx.needs_input_grad[1]:
            csr_t, _ = csr.transpose()  # rows: the n_cols sources; columns: the n_rows destinations
            grad_x = gcn_launch(csr_t, grad.to(ctx.x_dtype), dinv, None, False, ctx.add_self_loops, csr.n_rows)
        if ctx.needs_input_grad[3]:
            grad_bias = grad.float().sum(0).to(grad.dtype)
        return None, grad_x, None, grad_bias, None, None


def why_not(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None = None, relu: bool = False,
            add_self_loops: bool = True) -> str | None:
    if x.dim() != 2:
        return f"x must be [n_cols, F], got {x.dim()} dims"
    return triton_common.why_not(x, dinv, bias)


def gcn_aggregate(csr: CSR, x: Tensor, dinv: Tensor, bias: Tensor | None = None, relu: bool = False,
                  add_self_loops: bool = True) -> Tensor:
    """``out[i] = dinv[i] * (sum_{e in row i} dinv[col e] x[col e] + dinv[i] x[i]) + bias``, then optional ReLU.

    Shapes:
        x ``[n_cols, F]``, dinv ``[n_cols]``, bias ``[F]`` -> ``[n_rows, F]``
    """
    return TritonGcnAggregate.apply(csr, x, dinv, bias, relu, add_self_loops)
