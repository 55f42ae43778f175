"""SDDMM in Triton: one program per block of edges (and head), gathering both endpoints.

``add``: a ``[BLOCK_E, BLOCK_D]`` tile of ``a[row e] + b[col e]``. ``dot``: per head, the
dot product over ``D`` in chunks of ``BLOCK_D``, accumulated in fp32. Backward is SpMM:
``grad_a`` sums a row's edges, ``grad_b`` sums a column's edges through the cached ``A^T``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import triton_common
from ..csr import CSR, rows2d
from ..spmm.triton_kernel import spmm_launch


@triton.autotune(configs=triton_common.edge_configs(), key=["D"],
                 prune_configs_by={"early_config_prune": triton_common.prune_edge_configs})
@triton.jit
def _sddmm_add_kernel(ROW, COL, A, B, OUT, nnz, D, BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)  # [BLOCK_E]
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)  # [BLOCK_D]
    e_mask = e < nnz
    mask = e_mask[:, None] & (d < D)[None, :]
    r = tl.load(ROW + e, mask=e_mask, other=0).to(tl.int64)
    c = tl.load(COL + e, mask=e_mask, other=0).to(tl.int64)
    av = tl.load(A + r[:, None] * D + d[None, :], mask=mask, other=0.0).to(tl.float32)
    bv = tl.load(B + c[:, None] * D + d[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + e.to(tl.int64)[:, None] * D + d[None, :], (av + bv).to(OUT.dtype.element_ty), mask=mask)


@triton.autotune(configs=triton_common.edge_configs(), key=["D"],
                 prune_configs_by={"early_config_prune": triton_common.prune_edge_configs})
@triton.jit
def _sddmm_dot_kernel(ROW, COL, A, B, OUT, nnz, H, D, BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)  # [BLOCK_E]
    h = tl.program_id(1)
    e_mask = e < nnz
    r = tl.load(ROW + e, mask=e_mask, other=0).to(tl.int64)
    c = tl.load(COL + e, mask=e_mask, other=0).to(tl.int64)
    a_base = (r * H + h) * D
    b_base = (c * H + h) * D
    acc = tl.zeros([BLOCK_E, BLOCK_D], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        mask = e_mask[:, None] & (d < D)[None, :]
        av = tl.load(A + a_base[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
        bv = tl.load(B + b_base[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += av * bv
    tl.store(OUT + e.to(tl.int64) * H + h, tl.sum(acc, axis=1).to(OUT.dtype.element_ty), mask=e_mask)


def sddmm_add_launch(csr: CSR, a: Tensor, b: Tensor) -> Tensor:
    """``out[e] = a[row e] + b[col e]``. Shapes: a ``[n_rows, *]``, b ``[n_cols, *]`` -> ``[nnz, *]``."""
    a2, b2 = rows2d(a).contiguous(), rows2d(b).contiguous()
    width = a2.shape[1]
    out = torch.empty((csr.nnz,) + tuple(a.shape[1:]), dtype=a.dtype, device=a.device)  # [nnz, *]: no view
    if out.numel():
        def grid(meta):
            return (triton.cdiv(csr.nnz, meta["BLOCK_E"]), triton.cdiv(width, meta["BLOCK_D"]))

        _sddmm_add_kernel[grid](csr.row, csr.col, a2, b2, out.view(csr.nnz, width), csr.nnz, width)
    return out


def sddmm_dot_launch(csr: CSR, a: Tensor, b: Tensor) -> Tensor:
    """``out[e, h] = <a[row e, h], b[col e, h]>``. Shapes: ``[*, H, D]`` -> ``[nnz, H]``; ``[*, D]`` -> ``[nnz]``."""
    heads = a.shape[1] if a.dim() == 3 else 1
    a2, b2 = a.contiguous(), b.contiguous()
    out = torch.empty((csr.nnz, heads) if a.dim() == 3 else (csr.nnz,), dtype=a.dtype, device=a.device)  # no view
    if out.numel():
        if a.shape[-1] == 0:
            out.zero_()
        else:
            def grid(meta):
                return (triton.cdiv(csr.nnz, meta["BLOCK_E"]), heads)

            _sddmm_dot_kernel[grid](csr.row, csr.col, a2, b2, out.view(csr.nnz, heads), csr.nnz, heads, a.shape[-1])
    return out  # [nnz, H] or [nnz]


class TritonSddmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, a: Tensor, b: Tensor, op: str) -> Tensor:
        ctx.csr, ctx.op = csr, op
        ctx.save_for_backward(a, b)
        return sddmm_add_launch(csr, a, b) if op == "add" else sddmm_dot_launch(csr, a, b)

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, b = ctx.saved_tensors
        csr: CSR = ctx.csr
        csr_t, perm = csr.transpose()
        grad = grad.contiguous()
        grad_a = grad_b = None
        if ctx.op == "add":
            g = rows2d(grad)  # [nnz, K]
            if ctx.needs_input_grad[1]:
                grad_a = spmm_launch(csr, g, gather=False).view(a.shape)
            if ctx.needs_input_grad[2]:
                grad_b = spmm_launch(csr_t, g, col=perm).view(b.shape)  # edge k of A^T reads g[perm[k]]
        else:
            head_dim = a.shape[-1] if a.dim() == 3 else 0
            w = grad if a.dim() == 3 else grad.view(csr.nnz)
            if ctx.needs_input_grad[1]:
                grad_a = spmm_launch(csr, rows2d(b), w, head_dim=head_dim).view(a.shape)
            if ctx.needs_input_grad[2]:
                grad_b = spmm_launch(csr_t, rows2d(a), w[perm], head_dim=head_dim).view(b.shape)
        return None, grad_a, grad_b, None


def why_not(csr: CSR, a: Tensor, b: Tensor, op: str = "add") -> str | None:
    if op == "dot" and a.dim() not in (2, 3):
        return f"dot needs a [n_rows, D] or [n_rows, H, D], got {a.dim()} dims"
    return triton_common.why_not(a, b)


def sddmm(csr: CSR, a: Tensor, b: Tensor, op: str = "add") -> Tensor:
    """``op="add"``: ``out[e] = a[row e] + b[col e]``; ``op="dot"``: ``out[e] = <a[row e], b[col e]>`` over the
    last dim.

    Shapes:
        add: a ``[n_rows, H]``, b ``[n_cols, H]`` -> ``[nnz, H]``
        dot: a ``[n_rows, H, D]``, b ``[n_cols, H, D]`` -> ``[nnz, H]``; a ``[n_rows, D]`` -> ``[nnz]``
    """
    return TritonSddmm.apply(csr, a, b, op)
