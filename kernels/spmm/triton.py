"""SpMM in Triton: one program per destination row and block of features, rows launched by degree.

Rows are launched heaviest first (``CSR.row_order``), so on power-law graphs the long
rows start early and the short ones fill the gaps. Each program walks its row's edges
in tiles of ``BLOCK_E``, gathers ``[BLOCK_E, BLOCK_F]`` source features, weighs them
and accumulates in fp32. Backward: ``grad_x`` is the same kernel on the cached ``A^T``;
``grad_w`` is an SDDMM.
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
def _spmm_kernel(ROWPTR, COL, ROW_ORDER, W, X, OUT, F, HEAD_DIM, N_HEADS,
                 HAS_W: tl.constexpr, W_PER_HEAD: tl.constexpr, GATHER: tl.constexpr, MEAN: tl.constexpr,
                 BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    row = tl.load(ROW_ORDER + tl.program_id(0)).to(tl.int64)
    start = tl.load(ROWPTR + row).to(tl.int64)
    end = tl.load(ROWPTR + row + 1).to(tl.int64)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)  # [BLOCK_F]
    f_mask = f < F
    acc = tl.zeros([BLOCK_E, BLOCK_F], dtype=tl.float32)
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)  # [BLOCK_E]
        e_mask = e < end
        if GATHER:
            src = tl.load(COL + e, mask=e_mask, other=0).to(tl.int64)
        else:
            src = e  # the "features" are per-edge values: row e of X
        mask = e_mask[:, None] & f_mask[None, :]
        v = tl.load(X + src[:, None] * F + f[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            if W_PER_HEAD:
                w = tl.load(W + e[:, None] * N_HEADS + (f // HEAD_DIM)[None, :], mask=mask, other=0.0)
            else:
                w = tl.load(W + e, mask=e_mask, other=0.0)[:, None]
            v = v * w.to(tl.float32)
        acc += v
    out = tl.sum(acc, axis=0)  # [BLOCK_F]
    if MEAN:
        out = out / tl.maximum(end - start, 1).to(tl.float32)
    tl.store(OUT + row * F + f, out.to(OUT.dtype.element_ty), mask=f_mask)


def spmm_launch(csr: CSR, x: Tensor, weight: Tensor | None = None, mean: bool = False, head_dim: int = 0,
                col: Tensor | None = None, gather: bool = True) -> Tensor:
    """Launch :func:`_spmm_kernel`; ``out[i] = sum_{e in row i} w[e] x[src e]`` (``/deg`` if ``mean``).

    ``src e`` is ``col[e]`` (default ``csr.col``; pass e.g. a permutation to read edge values
    in another order), or ``e`` itself when ``gather=False``. ``weight`` ``[nnz]``, or
    ``[nnz, H]`` with ``head_dim=D`` weighing each ``D``-wide head of the features.

    Shapes:
        x ``[*, F]`` -> ``[n_rows, F]`` (dtype of x)
    """
    x = x.contiguous()
    feat = x.shape[1]
    out = torch.empty((csr.n_rows, feat), dtype=x.dtype, device=x.device)  # [n_rows, F]
    if out.numel() == 0:
        return out
    if csr.nnz == 0:
        return out.zero_()
    per_head = weight is not None and weight.dim() == 2
    w = weight.contiguous() if weight is not None else x  # dummy pointer when unweighted

    def grid(meta):
        return (csr.n_rows, triton.cdiv(feat, meta["BLOCK_F"]))

    _spmm_kernel[grid](csr.rowptr, csr.col if col is None else col, csr.row_order(), w, x, out, feat,
                       max(head_dim, 1), weight.shape[1] if per_head else 1,
                       HAS_W=weight is not None, W_PER_HEAD=per_head, GATHER=gather, MEAN=mean)
    return out


class TritonSpmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
        head_dim = x.shape[2] if x.dim() == 3 else 0
        out = spmm_launch(csr, x.reshape(x.shape[0], -1), edge_weight, reduce == "mean", head_dim)
        ctx.csr, ctx.reduce, ctx.x_shape = csr, reduce, x.shape
        ctx.save_for_backward(x, edge_weight)
        return out.view((csr.n_rows,) + tuple(x.shape[1:]))  # [n_rows, F] or [n_rows, H, D]

    @staticmethod
    def backward(ctx, grad: Tensor):
        from ..sddmm.triton import sddmm_dot_launch

        x, edge_weight = ctx.saved_tensors
        csr: CSR = ctx.csr
        grad = grad.contiguous()
        inv_deg = None
        if ctx.reduce == "mean":
            inv_deg = (1.0 / csr.in_degree().clamp(min=1).float())[csr.row]  # [nnz]
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:
            csr_t, perm = csr.transpose()
            w = edge_weight
            if inv_deg is not None:
                w = inv_deg if w is None else w * inv_deg.reshape((-1,) + (1,) * (w.dim() - 1)).to(w.dtype)
            w_t = None if w is None else w[perm]
            head_dim = x.shape[2] if x.dim() == 3 else 0
            grad_x = spmm_launch(csr_t, grad.reshape(grad.shape[0], -1), w_t, False, head_dim)
            grad_x = grad_x.view(ctx.x_shape)  # [n_cols, F] or [n_cols, H, D]
        if ctx.needs_input_grad[2]:
            grad_w = sddmm_dot_launch(csr, grad, x)  # [nnz] or [nnz, H]
            if inv_deg is not None:
                grad_w = grad_w * inv_deg.reshape((-1,) + (1,) * (grad_w.dim() - 1)).to(grad_w.dtype)
            grad_w = grad_w.to(edge_weight.dtype)
        return None, grad_x, grad_w, None


def why_not(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> str | None:
    return triton_common.why_not(x, edge_weight)


def spmm(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """``out[i] = sum_{e in row i} w[e] * x[col[e]]`` (``reduce="mean"``: divided by the row's degree).

    Shapes:
        x ``[n_cols, F]`` or ``[n_cols, H, D]``; edge_weight ``[nnz]`` or ``[nnz, H]``;
        out ``[n_rows, F]`` or ``[n_rows, H, D]``
    """
    return TritonSpmm.apply(csr, x, edge_weight, reduce)
