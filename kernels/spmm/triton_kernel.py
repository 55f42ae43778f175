"""SpMM in Triton: rows cut into balanced segments, segments grouped by length, one launch.

The kernel's unit of work is a *segment* (``triton_plan.py``): a run of one row's edges, at
most ``C`` long. A row of up to ``C`` edges is one segment and writes its output row
directly; a longer row (the hubs of a power-law graph, 48k edges in the benchmark graph) is
cut into ``ceil(deg / C)`` chunks that write fp32 partial rows, which a second small kernel
adds up in order (deterministic, no atomics). So no program walks more than ``C`` edges and
a hub no longer serialises one program while the rest of the GPU idles.

Segments are sorted by length (descending; ties in row order) and cut into three
classes, each with its own tile (``triton_tiles.py``), all in **one launch** that branches
on the program id:

    chunks   the pieces of long rows          R_L segments x D_L edges per step, looped
    medium   whole rows of D_S < len <= C     R_M x D_M, looped over the longest of the R_M
    short    whole rows of len <= D_S         R_S x D_S, one step (no loop)

A program loads the ``[R, D]`` column indices of its segments as one vector, gathers
``[R, D, BLOCK_F]`` source values (``BLOCK_F`` = the whole width up to 256, so each index
serves every feature), weighs them, sums over ``D`` in fp32, and stores ``[R, BLOCK_F]``
once (bf16 / fp16 are loaded at half the bytes and accumulated in fp32). Offsets are
int32 unless ``rows * F`` needs int64. Grouping ``R`` short rows per program shares the
per-program latency chain (segment table -> indices -> features) across rows. A mean
divides by ``max(deg, 1)`` on the device, the rule of ``CSR.mean_divisor``.

The launcher :func:`spmm_launch` serves the SpMM's autograd function (``triton.py``) and
the SDDMM's backward (``sddmm/triton.py``), so it sits below both.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..csr import CSR
from . import triton_tiles
from .triton_plan import plan_for


@triton.jit
def _segments(pid, first, count, SEG_START, SEG_END, SEG_DEST, COL, W, X, OUT, F, HEAD_DIM, N_HEADS,
              HAS_W: tl.constexpr, W_PER_HEAD: tl.constexpr, GATHER: tl.constexpr, MEAN: tl.constexpr,
              WIDE: tl.constexpr, R: tl.constexpr, D: tl.constexpr, BLOCK_F: tl.constexpr,
              LOOP: tl.constexpr, STAGES: tl.constexpr):
    """Sum ``R`` segments ``first + pid * R + [0, R)`` (of ``count``) into their ``dest`` rows of OUT."""
    s = pid * R + tl.arange(0, R)  # [R]
    s_mask = s < count
    s = s + first
    start = tl.load(SEG_START + s, mask=s_mask, other=0)
    end = tl.load(SEG_END + s, mask=s_mask, other=0)
    dest = tl.load(SEG_DEST + s, mask=s_mask, other=0)
    if WIDE:
        start, end, dest = start.to(tl.int64), end.to(tl.int64), dest.to(tl.int64)
    else:
        start, end, dest = start.to(tl.int32), end.to(tl.int32), dest.to(tl.int32)
    length = end - start  # [R]
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)  # [BLOCK_F]
    f_mask = f < F
    d = tl.arange(0, D)  # [D]
    acc = tl.zeros([R, BLOCK_F], dtype=tl.float32)
    if LOOP:
        n = tl.max(length, axis=0)
    else:
        n = D
    for k in tl.range(0, n, D, num_stages=STAGES):
        e = start[:, None] + k + d[None, :]  # [R, D]
        e_mask = (k + d)[None, :] < length[:, None]
        if GATHER:
            src = tl.load(COL + e, mask=e_mask, other=0)
        else:
            src = e  # the "features" are per-edge values: row e of X
        if WIDE:
            src = src.to(tl.int64)
        else:
            src = src.to(tl.int32)
        mask = e_mask[:, :, None] & f_mask[None, None, :]
        v = tl.load(X + src[:, :, None] * F + f[None, None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            if W_PER_HEAD:
                w = tl.load(W + e[:, :, None] * N_HEADS + (f // HEAD_DIM)[None, None, :], mask=mask, other=0.0)
            else:
                w = tl.load(W + e, mask=e_mask, other=0.0)[:, :, None]
            v = v * w.to(tl.float32)
        acc += tl.sum(v, axis=1)
    if MEAN:
        acc = acc / tl.maximum(length, 1).to(tl.float32)[:, None]
    tl.store(OUT + dest[:, None] * F + f[None, :], acc.to(OUT.dtype.element_ty),
             mask=s_mask[:, None] & f_mask[None, :])


@triton.jit
def _spmm_kernel(SEG_START, SEG_END, SEG_DEST, COL, W, X, OUT, PART, F, HEAD_DIM, N_HEADS,
                 n_chunk, n_medium, n_short, p_chunk, p_medium,
                 HAS_W: tl.constexpr, W_PER_HEAD: tl.constexpr, GATHER: tl.constexpr, MEAN: tl.constexpr,
                 WIDE: tl.constexpr, BLOCK_F: tl.constexpr, STAGES: tl.constexpr,
                 R_L: tl.constexpr, D_L: tl.constexpr, R_M: tl.constexpr, D_M: tl.constexpr,
                 R_S: tl.constexpr, D_S: tl.constexpr):
    """One launch for the three classes: programs ``[0, p_chunk)`` chunks, then medium, then short rows."""
    pid = tl.program_id(0)
    if pid < p_chunk:
        _segments(pid, 0, n_chunk, SEG_START, SEG_END, SEG_DEST, COL, W, X, PART, F, HEAD_DIM, N_HEADS,
                  HAS_W, W_PER_HEAD, GATHER, False, WIDE, R_L, D_L, BLOCK_F, True, STAGES)
    elif pid < p_medium:
        _segments(pid - p_chunk, n_chunk, n_medium, SEG_START, SEG_END, SEG_DEST, COL, W, X, OUT, F, HEAD_DIM,
                  N_HEADS, HAS_W, W_PER_HEAD, GATHER, MEAN, WIDE, R_M, D_M, BLOCK_F, True, STAGES)
    else:
        _segments(pid - p_medium, n_chunk + n_medium, n_short, SEG_START, SEG_END, SEG_DEST, COL, W, X, OUT, F,
                  HEAD_DIM, N_HEADS, HAS_W, W_PER_HEAD, GATHER, MEAN, WIDE, R_S, D_S, BLOCK_F, False, STAGES)


@triton.jit
def _combine_kernel(LONG_ROW, PART_PTR, PART, OUT, ROWPTR, F, MEAN: tl.constexpr, WIDE: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_F: tl.constexpr):
    """Add up each long row's fp32 chunk partials in chunk order and store the row (``/deg`` if MEAN)."""
    i = tl.program_id(0)
    row = tl.load(LONG_ROW + i)
    p0 = tl.load(PART_PTR + i)
    p1 = tl.load(PART_PTR + i + 1)
    if WIDE:
        row, p0, p1 = row.to(tl.int64), p0.to(tl.int64), p1.to(tl.int64)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f < F
    acc = tl.zeros([BLOCK_P, BLOCK_F], dtype=tl.float32)
    for p in range(p0, p1, BLOCK_P):
        pp = p + tl.arange(0, BLOCK_P)
        mask = (pp < p1)[:, None] & f_mask[None, :]
        acc += tl.load(PART + pp[:, None] * F + f[None, :], mask=mask, other=0.0)
    out = tl.sum(acc, axis=0)  # [BLOCK_F]
    if MEAN:
        deg = tl.load(ROWPTR + row + 1) - tl.load(ROWPTR + row)
        out = out / tl.maximum(deg, 1).to(tl.float32)
    tl.store(OUT + row * F + f, out.to(OUT.dtype.element_ty), mask=f_mask)


def spmm_launch(csr: CSR, x: Tensor, weight: Tensor | None = None, mean: bool = False, head_dim: int = 0,
                col: Tensor | None = None, gather: bool = True, tiles: tuple | None = None,
                wide: bool | None = None, out: Tensor | None = None) -> Tensor:
    """``out[i] = sum_{e in row i} w[e] x[src e]`` (``/deg`` if ``mean``), via the cached segment plan.

    ``src e`` is ``col[e]`` (default ``csr.col``; pass e.g. a permutation to read edge values
    in another order), or ``e`` itself when ``gather=False``. ``weight`` ``[nnz]``, or
    ``[nnz, H]`` with ``head_dim=D`` weighing each ``D``-wide head of the features.
    ``tiles`` overrides the tiles (default: those ``triton_tiles.search`` measured for these
    inputs on ``csr``, else ``triton_tiles.TILES``); ``wide`` forces int64 (True) or int32
    offsets (default: int64 only where ``rows * F`` or ``nnz`` reach 2**31). ``out``: a contiguous
    ``[n_rows, F]`` buffer to write (e.g. a view of the caller's output), else a new one.

    Shapes:
        x ``[*, F]`` -> ``[n_rows, F]`` (dtype of x)
    """
    x = x.contiguous()
    feat = x.shape[1]
    if out is None:
        out = torch.empty((csr.n_rows, feat), dtype=x.dtype, device=x.device)  # [n_rows, F]
    if out.numel() == 0:
        return out
    if csr.nnz == 0:
        return out.zero_()
    tiles = tiles or triton_tiles.tuned(csr, x, weight, mean, head_dim) or triton_tiles.tiles_for(feat)
    C, (r_l, d_l), (r_m, d_m), (r_s, d_s), warps, stages = tiles
    plan = plan_for(csr, C, d_s)
    block_f = triton_tiles.block_width(feat)
    per_head = weight is not None and weight.dim() == 2
    w = weight.contiguous() if weight is not None else x  # dummy pointer when unweighted
    part = torch.empty((plan.n_chunk, feat), dtype=torch.float32, device=x.device) if plan.n_chunk else out
    if wide is None:
        wide = max(x.shape[0], csr.n_rows, plan.n_chunk, csr.nnz) * max(feat, 1) >= 2**31 or csr.nnz >= 2**31
    p_chunk = triton.cdiv(plan.n_chunk, r_l)
    p_medium = p_chunk + triton.cdiv(plan.n_medium, r_m)
    n_prog = p_medium + triton.cdiv(plan.n_short, r_s)
    grid = (n_prog, triton.cdiv(feat, block_f))
    _spmm_kernel[grid](plan.start, plan.end, plan.dest, csr.col if col is None else col, w, x, out, part, feat,
                       max(head_dim, 1), weight.shape[1] if per_head else 1,
                       plan.n_chunk, plan.n_medium, plan.n_short, p_chunk, p_medium,
                       HAS_W=weight is not None, W_PER_HEAD=per_head, GATHER=gather, MEAN=mean, WIDE=wide,
                       BLOCK_F=block_f, STAGES=stages, R_L=r_l, D_L=d_l, R_M=r_m, D_M=d_m, R_S=r_s, D_S=d_s,
                       num_warps=warps)
    if plan.n_chunk:
        _combine_kernel[(plan.long_rows.numel(), grid[1])](plan.long_rows, plan.part_ptr, part, out, csr.rowptr,
                                                            feat, MEAN=mean, WIDE=wide, BLOCK_P=8,
                                                            BLOCK_F=block_f, num_warps=4)
    return out
