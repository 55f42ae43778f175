"""Segment softmax in Triton: one program per row and block of heads, online max and sum.

Pass 1 walks the row's edges once keeping the running max ``m`` and the sum ``l`` of
``exp(s - m)`` (rescaled when ``m`` grows); pass 2 writes ``exp(s - m) / l``. Backward:
``grad_s = y * (g - sum_row(g * y))``, again two passes over the row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import triton_common
from ..csr import CSR, rows2d


@triton.autotune(configs=triton_common.row_configs(), key=["F"],
                 prune_configs_by={"early_config_prune": triton_common.prune_row_configs})
@triton.jit
def _softmax_kernel(ROWPTR, ROW_ORDER, S, OUT, F, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    row = tl.load(ROW_ORDER + tl.program_id(0)).to(tl.int64)
    start = tl.load(ROWPTR + row).to(tl.int64)
    end = tl.load(ROWPTR + row + 1).to(tl.int64)
    h = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)  # [BLOCK_F] heads
    h_mask = h < F
    m = tl.full([BLOCK_F], float("-inf"), dtype=tl.float32)
    denom = tl.zeros([BLOCK_F], dtype=tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        mask = (e < end)[:, None] & h_mask[None, :]
        s = tl.load(S + e[:, None] * F + h[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(s, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # masked heads: avoid -inf - -inf
        denom = denom * tl.exp(m - m_safe) + tl.sum(tl.exp(s - m_safe[None, :]), axis=0)
        m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    denom = tl.where(denom > 0, denom, 1.0)  # masked heads only
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        mask = (e < end)[:, None] & h_mask[None, :]
        s = tl.load(S + e[:, None] * F + h[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(s - m_safe[None, :]) / denom[None, :]
        tl.store(OUT + e[:, None] * F + h[None, :], y.to(OUT.dtype.element_ty), mask=mask)


@triton.autotune(configs=triton_common.row_configs(), key=["F"],
                 prune_configs_by={"early_config_prune": triton_common.prune_row_configs})
@triton.jit
def _softmax_backward_kernel(ROWPTR, ROW_ORDER, Y, G, OUT, F, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    row = tl.load(ROW_ORDER + tl.program_id(0)).to(tl.int64)
    start = tl.load(ROWPTR + row).to(tl.int64)
    end = tl.load(ROWPTR + row + 1).to(tl.int64)
    h = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    h_mask = h < F
    acc = tl.zeros([BLOCK_E, BLOCK_F], dtype=tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        mask = (e < end)[:, None] & h_mask[None, :]
        offs = e[:, None] * F + h[None, :]
        y = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)  # [BLOCK_F]
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        mask = (e < end)[:, None] & h_mask[None, :]
        offs = e[:, None] * F + h[None, :]
        y = tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(OUT + offs, (y * (g - dot[None, :])).to(OUT.dtype.element_ty), mask=mask)


def _launch(kernel, csr: CSR, width: int, *tensors: Tensor) -> None:
    def grid(meta):
        return (csr.n_rows, triton.cdiv(width, meta["BLOCK_F"]))

    kernel[grid](csr.rowptr, csr.row_order(), *tensors, width)


class TritonSegmentSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, scores: Tensor) -> Tensor:
        s = rows2d(scores).contiguous()  # [nnz, H]
        out = torch.empty(scores.shape, dtype=s.dtype, device=s.device)  # the output itself, not a view of one
        if out.numel():
            _launch(_softmax_kernel, csr, s.shape[1], s, out.view(s.shape))
        ctx.csr = csr
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (y,) = ctx.saved_tensors
        csr: CSR = ctx.csr
        y = rows2d(y)  # [nnz, H]
        g = grad.reshape(y.shape).contiguous()
        out = torch.empty_like(y)
        if out.numel():
            _launch(_softmax_backward_kernel, csr, y.shape[1], y, g, out)
        return None, out.view(grad.shape)


def why_not(csr: CSR, scores: Tensor) -> str | None:
    return triton_common.why_not(scores)


def segment_softmax(csr: CSR, scores: Tensor) -> Tensor:
    """Softmax of every row's edge scores: ``out[e] = exp(s[e]) / sum_{e' in row e} exp(s[e'])``.

    Shapes:
        scores ``[nnz, H]`` or ``[nnz]`` -> same shape
    """
    return TritonSegmentSoftmax.apply(csr, scores)
