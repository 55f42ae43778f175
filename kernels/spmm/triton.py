"""SpMM in Triton: rows cut into balanced segments, segments grouped by length, one launch.

The kernel's unit of work is a *segment*: a run of one row's edges, at most ``C`` long.
A row of up to ``C`` edges is one segment and writes its output row directly; a longer
row (the hubs of a power-law graph, 48k edges in the benchmark graph) is cut into
``ceil(deg / C)`` chunks that write fp32 partial rows, which a second small kernel adds
up in order (deterministic, no atomics). So no program walks more than ``C`` edges and
a hub no longer serialises one program while the rest of the GPU idles.

Segments are sorted by length (descending; ties in row order) and cut into three
classes, each with its own tile, all in **one launch** that branches on the program id:

    chunks   the pieces of long rows          R_L segments x D_L edges per step, looped
    medium   whole rows of D_S < len <= C     R_M x D_M, looped over the longest of the R_M
    short    whole rows of len <= D_S         R_S x D_S, one step (no loop)

A program loads the ``[R, D]`` column indices of its segments as one vector, gathers
``[R, D, BLOCK_F]`` source values (``BLOCK_F`` = the whole width up to 256, so each index
serves every feature), weighs them, sums over ``D`` in fp32, and stores ``[R, BLOCK_F]``
once (bf16 / fp16 are loaded at half the bytes and accumulated in fp32). Offsets are
int32 unless ``rows * F`` needs int64. Grouping ``R`` short rows per program shares the
per-program latency chain (segment table -> indices -> features) across rows.

Tiles are measured per graph on CUDA (:func:`tune_tiles`: a coordinate descent over the
short-row tile, the medium-row step, the chunk length ``C``, warps and pipeline stages,
timed on the real inputs and cached on the CSR per width bucket, dtype and weight kind);
:data:`TILES` is where it starts and what ``GNNDIST_KERNEL=triton`` runs.

Status: correct compiled on an H200 (the kernel tests) but not yet timed against cuSPARSE
there; ``gnndist.kernels.dispatch`` tunes this path, times it against cuSPARSE on first use
and keeps the faster, so the model never runs the slower path.

The plan (segment table, class boundaries) is built once per CSR on the device and
cached on it. Tiles per width are in :data:`TILES`; :func:`spmm_launch` takes ``tiles=``
to try others. Backward: ``grad_x = A^T grad`` is dispatched as an SpMM of its own on the
cached transpose (``spmm.transposed_product``: this kernel with ``A^T``'s own plan, or
cuSPARSE where that was measured faster for ``A^T``); ``grad_w`` is an SDDMM.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from .. import dispatch, triton_common
from ..csr import CSR, rows2d
from . import transposed_product

log = logging.getLogger(__name__)

# BLOCK_F -> (C, (R_L, D_L), (R_M, D_M), (R_S, D_S), num_warps, stages): the starting point of
# the measured tiles (`tune_tiles`) and the fixed tiles of GNNDIST_KERNEL=triton. Chosen by a
# register budget, not by timing: the largest tile holds ~32 fp32 values per thread, which keeps
# the unweighted sum at <= 64 registers on sm_90 (>= 8 resident 4-warp programs per SM for the
# gathers' latency) -- `python -m gnndist.kernels.compile_check` prints them.
# `benchmarks/spmm_tiles.py --sweep` on a GPU prints what the tuning timed.
TILES: dict[int, tuple] = {
    16: (512, (4, 32), (4, 32), (16, 8), 4, 1),
    32: (512, (2, 32), (2, 32), (8, 8), 4, 1),
    64: (512, (1, 32), (1, 32), (8, 8), 4, 1),
    128: (512, (1, 32), (1, 32), (4, 8), 4, 1),
    256: (512, (1, 32), (1, 32), (4, 8), 8, 1),
}
INTERPRETER_TILES = (8, (2, 4), (2, 4), (4, 4), 4, 1)  # small C so the tests exercise chunks
MAX_BLOCK_F = 256


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


@dataclass
class Plan:
    """Segments of one CSR for one chunk length ``C``, sorted chunks | medium | short.

    Shapes:
        start, end ``[n_seg]`` (edge range, index dtype), dest ``[n_seg]`` int32/int64
        (output row, or partial row for chunks); long_rows ``[n_long]``, part_ptr ``[n_long + 1]``
    """

    C: int
    d_short: int
    start: Tensor
    end: Tensor
    dest: Tensor
    n_chunk: int
    n_medium: int
    n_short: int
    long_rows: Tensor
    part_ptr: Tensor


def build_plan(csr: CSR, C: int, d_short: int) -> Plan:
    """Cut ``csr``'s rows into segments of at most ``C`` edges and order them by class (see module doc)."""
    rowptr = csr.rowptr.long()
    deg = rowptr[1:] - rowptr[:-1]  # [n_rows]
    order = csr.row_order().long()  # by decreasing degree, ties by row id
    d_sorted = deg[order]
    n_long = int((d_sorted > C).sum())
    n_medium = int((d_sorted > d_short).sum()) - n_long
    long_rows = order[:n_long]
    n_chunks = (deg[long_rows] + C - 1) // C  # [n_long]
    part_ptr = torch.zeros(n_long + 1, dtype=torch.int64, device=csr.device)
    torch.cumsum(n_chunks, 0, out=part_ptr[1:])
    n_chunk = int(part_ptr[-1])
    chunk_row = torch.repeat_interleave(long_rows, n_chunks, output_size=n_chunk)  # [n_chunk]
    k = torch.arange(n_chunk, device=csr.device) - torch.repeat_interleave(part_ptr[:-1], n_chunks,
                                                                          output_size=n_chunk)
    c_start = rowptr[chunk_row] + k * C
    c_end = torch.minimum(c_start + C, rowptr[chunk_row + 1])
    whole = order[n_long:]
    start = torch.cat([c_start, rowptr[whole]])
    end = torch.cat([c_end, rowptr[whole + 1]])
    dest = torch.cat([torch.arange(n_chunk, device=csr.device), whole])
    idx = csr.col.dtype
    return Plan(C, d_short, start.to(idx), end.to(idx), dest.to(idx), n_chunk, n_medium,
                csr.n_rows - n_long - n_medium, long_rows.to(idx), part_ptr.to(idx))


def tiles_for(feat: int) -> tuple:
    """The tile set for width ``feat`` (see :data:`TILES`)."""
    if triton_common.INTERPRETED:
        return INTERPRETER_TILES
    return TILES[min(MAX_BLOCK_F, max(16, triton.next_power_of_2(feat)))]


# ---------------------------------------------------------------------- tiles measured per graph
# The tiles of TILES are a register-budget guess; the best ones depend on the graph's row
# lengths (and A^T's differ from A's). On CUDA, the dispatcher calls `tune` before it times
# this path against cuSPARSE: a coordinate descent over the fields below, each option timed on
# the real inputs, the fastest kept on the CSR per width bucket, dtype and weight kind (so
# forward and backward, on A and A^T, tune apart). GNNDIST_KERNEL=triton skips it: the
# fixed TILES, bit-reproducible from run to run.
TUNE_ENV = "GNNDIST_SPMM_TUNE"  # "0": never tune (the fixed TILES everywhere)


def _with(tiles: tuple, field: str, value: int) -> tuple:
    """``tiles`` with one field changed; the tile's edges x rows product is kept where a D changes."""
    C, (rl, dl), (rm, dm), (rs, ds), warps, stages = tiles
    if field == "C":
        return (value, (rl, dl), (rm, dm), (rs, ds), warps, stages)
    if field == "D_S":
        return (C, (rl, dl), (rm, dm), (max(1, rs * ds // value), value), warps, stages)
    if field == "D_M":  # medium rows and chunks share the edge step
        return (C, (max(1, rl * dl // value), value), (max(1, rm * dm // value), value), (rs, ds), warps, stages)
    if field == "warps":
        return (C, (rl, dl), (rm, dm), (rs, ds), value, stages)
    if field == "stages":
        return (C, (rl, dl), (rm, dm), (rs, ds), warps, value)
    raise ValueError(f"unknown tile field {field!r}")


TUNE_FIELDS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("D_S", (4, 8, 16)),  # short rows: edges per row slot (rows <= D_S are "short")
    ("D_M", (16, 32, 64)),  # medium rows and chunks: edges per step
    ("C", (256, 512, 1024, 2048)),  # chunk length: rows longer than C are split
    ("warps", (2, 4, 8)),
    ("stages", (1, 3)),
)


def tile_options(tiles: tuple, field: str, values: tuple[int, ...]) -> list[tuple]:
    """The distinct tile sets ``tiles`` with ``field`` set to each of ``values`` (``tiles`` itself first)."""
    out = [tiles]
    for v in values:
        t = _with(tiles, field, v)
        if t not in out and t[0] % max(t[1][1], 1) == 0:  # a chunk is whole steps
            out.append(t)
    return out


def _tune_key(feat: int, x: Tensor, weight: Tensor | None, mean: bool, head_dim: int) -> tuple:
    kind = None if weight is None else (weight.dim(), weight.dtype)
    return ("spmm_tiles", min(MAX_BLOCK_F, max(16, triton.next_power_of_2(feat))), x.dtype, kind, mean, head_dim)


def tune_tiles(csr: CSR, x: Tensor, weight: Tensor | None = None, mean: bool = False, head_dim: int = 0,
               timer=None) -> tuple:
    """The fastest tiles for these inputs by coordinate descent over :data:`TUNE_FIELDS` (cached on ``csr``).

    ``timer(fn) -> seconds`` times one launch (default: Triton's ``do_bench``, kernel time).
    Starts from :func:`tiles_for`; for each field in turn every option is timed with the
    others at their best so far and the fastest kept; an option that fails to compile or
    run is skipped. :func:`spmm_launch` uses the result for inputs of the same key.
    """
    x2 = rows2d(x)
    key = _tune_key(x2.shape[1], x2, weight, mean, head_dim)
    hit = csr._cache.get(key)
    if hit is not None:
        return hit[0]
    if timer is None:
        from triton.testing import do_bench  # (no `import triton.testing` here: it would make `triton` local)

        def timer(fn) -> float:
            return do_bench(fn, warmup=3, rep=10) * 1e-3

    times: dict[tuple, float] = {}

    def cost(tiles: tuple) -> float:
        if tiles not in times:
            try:
                times[tiles] = timer(lambda: spmm_launch(csr, x2, weight, mean, head_dim, tiles=tiles))
            except Exception as e:  # e.g. out of registers or shared memory on this GPU
                lines = str(e).strip().splitlines()
                log.info("spmm tiles %s skipped: %s", tiles, lines[-1] if lines else type(e).__name__)
                times[tiles] = float("inf")
        return times[tiles]

    best = tiles_for(x2.shape[1])
    for field, values in TUNE_FIELDS:
        best = min(tile_options(best, field, values), key=cost)
    if cost(best) == float("inf"):
        raise RuntimeError(f"no SpMM tile set ran on {csr}")
    csr._cache[key] = (best, times)
    log.info("spmm tiles on %s, %s: %s (%.1f us; default %.1f us)", csr, key[1:], best, 1e6 * times[best],
             1e6 * times[tiles_for(x2.shape[1])])
    return best


def tune(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> None:
    """Dispatch's hook before this path is timed: measure the tiles for these inputs (CUDA only)."""
    if x.device.type != "cuda" or triton_common.INTERPRETED or os.environ.get(TUNE_ENV, "1") == "0":
        return
    head_dim = x.shape[2] if x.dim() == 3 else 0
    with torch.no_grad():
        tune_tiles(csr, x.detach(), None if edge_weight is None else edge_weight.detach(), reduce == "mean", head_dim)


def tuned(csr: CSR, x: Tensor, weight: Tensor | None, mean: bool, head_dim: int) -> tuple | None:
    """The tiles :func:`tune_tiles` measured for inputs like these on ``csr``, or None."""
    hit = csr._cache.get(_tune_key(x.shape[1], x, weight, mean, head_dim))
    return None if hit is None else hit[0]


def spmm_launch(csr: CSR, x: Tensor, weight: Tensor | None = None, mean: bool = False, head_dim: int = 0,
                col: Tensor | None = None, gather: bool = True, tiles: tuple | None = None,
                wide: bool | None = None, out: Tensor | None = None) -> Tensor:
    """``out[i] = sum_{e in row i} w[e] x[src e]`` (``/deg`` if ``mean``), via the cached segment plan.

    ``src e`` is ``col[e]`` (default ``csr.col``; pass e.g. a permutation to read edge values
    in another order), or ``e`` itself when ``gather=False``. ``weight`` ``[nnz]``, or
    ``[nnz, H]`` with ``head_dim=D`` weighing each ``D``-wide head of the features.
    ``tiles`` overrides the tiles (default: those :func:`tune_tiles` measured for these inputs
    on ``csr``, else :data:`TILES`); ``wide`` forces int64 (True) or int32
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
    C, (r_l, d_l), (r_m, d_m), (r_s, d_s), warps, stages = (tiles or tuned(csr, x, weight, mean, head_dim)
                                                            or tiles_for(feat))
    plan: Plan = csr.cached(("spmm_plan", C, d_s), lambda: build_plan(csr, C, d_s))
    block_f = min(MAX_BLOCK_F, max(16, triton.next_power_of_2(feat)))
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


class TritonSpmm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, csr: CSR, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
        head_dim = x.shape[2] if x.dim() == 3 else 0
        # the output itself, never a view of one: a caller may modify it in place (GCN's scale and self loop)
        out = x.new_empty((csr.n_rows,) + tuple(x.shape[1:]))  # [n_rows, F] or [n_rows, H, D]
        spmm_launch(csr, rows2d(x), edge_weight, reduce == "mean", head_dim,
                    out=rows2d(out))
        ctx.csr, ctx.reduce, ctx.impl = csr, reduce, dispatch.pinned()
        ctx.save_for_backward(x, edge_weight)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        from ..sddmm.triton import sddmm_dot_launch

        x, edge_weight = ctx.saved_tensors
        csr: CSR = ctx.csr
        grad = grad.contiguous()
        mean = ctx.reduce == "mean"
        grad_x = grad_w = None
        if ctx.needs_input_grad[1]:  # A^T grad: its own dispatch (triton when the forward was forced)
            grad_x = transposed_product(csr, grad, edge_weight, ctx.reduce, ctx.impl)  # [n_cols, F] or [n_cols, H, D]
        if ctx.needs_input_grad[2]:
            grad_w = sddmm_dot_launch(csr, grad, x)  # [nnz] or [nnz, H]
            if mean:
                inv_deg = (1.0 / csr.in_degree().clamp(min=1).float())[csr.row]
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
