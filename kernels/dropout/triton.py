"""Hash dropout in one pass: hash (node key, column pair) -> 16-bit draw -> ``x * scale`` or 0.

The draws are those of :func:`gnndist.kernels.dropout.reference.cell_draws` (wrapping uint32
arithmetic), so a rank on a GPU draws exactly the mask a rank on a CPU draws. The torch path
evaluates the pair hash as a few elementwise kernels over an ``[n, F / 2]`` int32 tensor and keeps
a bool mask for the backward; this kernel reads ``x`` once, writes the output once, and the
backward recomputes the mask on the gradient.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from gnndist.kernels.dropout import reference
from torch import Tensor

# compiled kernels may read module globals only when they are constexpr
GOLDEN = tl.constexpr(reference.GOLDEN)  # the column pairs' multiplier
PAIR_SALT = tl.constexpr(reference.PAIR_SALT)
M1 = tl.constexpr(reference.M1)  # the multipliers
M2 = tl.constexpr(reference.M2)


@triton.jit
def _mix(h):
    """lowbias32 on uint32 (logical shifts, multiplies modulo 2**32)."""
    h = h ^ (h >> 16)
    h = h * tl.full(h.shape, M1, tl.uint32)
    h = h ^ (h >> 15)
    h = h * tl.full(h.shape, M2, tl.uint32)
    return h ^ (h >> 16)


@triton.jit
def _dropout_kernel(X, KEYS, OUT, n, F, threshold, scale, BLOCK_R: tl.constexpr, BLOCK_F: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # [BLOCK_R]
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)  # [BLOCK_F]
    r_mask = r < n
    mask = r_mask[:, None] & (f < F)[None, :]
    key = tl.load(KEYS + r, mask=r_mask, other=0).to(tl.uint32, bitcast=True)
    pair = (f >> 1).to(tl.uint32)
    pair_key = _mix(pair * tl.full(f.shape, GOLDEN, tl.uint32) + tl.full(f.shape, PAIR_SALT, tl.uint32))
    h = (key[:, None] ^ pair_key[None, :]) * tl.full((BLOCK_R, BLOCK_F), M1, tl.uint32)
    h = (h ^ (h >> 16)) * tl.full((BLOCK_R, BLOCK_F), M2, tl.uint32)
    draw = ((h >> ((f & 1) * 16).to(tl.uint32)[None, :]) & 0xFFFF) ^ 0x8000
    offs = r.to(tl.int64)[:, None] * F + f[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0)
    out = tl.where(draw >= threshold, x.to(tl.float32) * scale, 0.0)
    tl.store(OUT + offs, out.to(OUT.dtype.element_ty), mask=mask)


def dropout_launch(x: Tensor, keys: Tensor, p: float) -> Tensor:
    """``x`` with cell (i, j) zeroed where ``cell_draws(keys[i], j) < mask_threshold(p)``, else scaled by
    ``1 / (1 - p)``.

    Shapes:
        x ``[n, F]``, keys ``[n]`` int32 -> ``[n, F]``
    """
    x = x.contiguous()
    out = torch.empty_like(x)
    n, width = x.shape
    if out.numel() == 0:
        return out
    block_f = min(128, max(16, triton.next_power_of_2(width)))
    block_r = max(1, 2048 // block_f)  # 16 values per thread: the hash needs registers
    grid = (triton.cdiv(n, block_r), triton.cdiv(width, block_f))
    _dropout_kernel[grid](x, keys.contiguous(), out, n, width, reference.mask_threshold(p), 1.0 / (1.0 - p),
                          BLOCK_R=block_r, BLOCK_F=block_f, num_warps=4)
    return out


class HashDropout(torch.autograd.Function):
    """Dropout whose backward recomputes the mask from the keys (nothing saved but the keys)."""

    @staticmethod
    def forward(ctx, x: Tensor, keys: Tensor, p: float) -> Tensor:
        ctx.save_for_backward(keys)
        ctx.p = p
        return dropout_launch(x, keys, p)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (keys,) = ctx.saved_tensors
        return dropout_launch(grad, keys, ctx.p), None, None


def dropout(x: Tensor, keys: Tensor, p: float) -> Tensor:
    """The reference's dropout in one pass, the mask recomputed in the backward (nothing stored but the keys).

    Shapes:
        x ``[n, F]``, keys ``[n]`` int32 -> ``[n, F]``
    """
    return HashDropout.apply(x, keys, p)
