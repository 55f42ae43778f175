"""Tiles of the Triton SpMM: the fixed starting set per width, the options, and their measurement per graph.

A tile set is ``(C, (R_L, D_L), (R_M, D_M), (R_S, D_S), num_warps, stages)``: the chunk length,
then segments x edges per step for chunks, medium and short rows (see ``triton_kernel.py``).

The fixed :data:`TILES` are a register-budget guess; the best ones depend on the graph's row
lengths (and ``A^T``'s differ from ``A``'s). On CUDA, before the dispatcher times this path
against cuSPARSE, :func:`search` runs a coordinate descent over :data:`TUNE_FIELDS`, each option
timed on the real inputs, and keeps the fastest on the CSR per width bucket, dtype and weight
kind (so forward and backward, on ``A`` and ``A^T``, tune apart). A forced path
(``impl="triton"``) or ``tune=False`` skips it: the fixed TILES, bit-reproducible from run to run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import triton
from torch import Tensor

from .. import triton_common
from ..csr import CSR

log = logging.getLogger(__name__)

Tiles = tuple  # (C, (R_L, D_L), (R_M, D_M), (R_S, D_S), num_warps, stages)

# BLOCK_F -> tiles: the starting point of the measured tiles and the fixed tiles of a forced path.
# Chosen by a register budget, not by timing: the largest tile holds ~32 fp32 values per thread,
# which keeps the unweighted sum at <= 64 registers on sm_90 (>= 8 resident 4-warp programs per SM
# for the gathers' latency) -- `python -m gnndist.kernels.compile_check` prints them.
# `benchmarks/spmm_tiles.py --sweep` on a GPU prints what the tuning timed.
TILES: dict[int, Tiles] = {
    16: (512, (4, 32), (4, 32), (16, 8), 4, 1),
    32: (512, (2, 32), (2, 32), (8, 8), 4, 1),
    64: (512, (1, 32), (1, 32), (8, 8), 4, 1),
    128: (512, (1, 32), (1, 32), (4, 8), 4, 1),
    256: (512, (1, 32), (1, 32), (4, 8), 8, 1),
}
INTERPRETER_TILES: Tiles = (8, (2, 4), (2, 4), (4, 4), 4, 1)  # small C so the tests exercise chunks
MAX_BLOCK_F = 256

# a tile set replaces the best so far only when faster by more than MARGIN, and the winner is timed again beside
# the fixed tiles: on a small graph a launch takes tens of microseconds, and single timings' noise had the tuning
# keep tiles 1.5-3x slower than the fixed ones (H200, Coauthor CS, issue 50)
MARGIN = 0.05

TUNE_FIELDS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("D_S", (4, 8, 16)),  # short rows: edges per row slot (rows <= D_S are "short")
    ("D_M", (16, 32, 64)),  # medium rows and chunks: edges per step
    ("C", (256, 512, 1024, 2048)),  # chunk length: rows longer than C are split
    ("warps", (2, 4, 8)),
    ("stages", (1, 3)),
)


def block_width(feat: int) -> int:
    """Features per program for width ``feat``: the whole width, a power of two in ``[16, MAX_BLOCK_F]``."""
    return min(MAX_BLOCK_F, max(16, triton.next_power_of_2(feat)))


def tiles_for(feat: int) -> Tiles:
    """The fixed tile set for width ``feat`` (see :data:`TILES`)."""
    if triton_common.INTERPRETED:
        return INTERPRETER_TILES
    return TILES[block_width(feat)]


def _with(tiles: Tiles, field: str, value: int) -> Tiles:
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


def tile_options(tiles: Tiles, field: str, values: tuple[int, ...]) -> list[Tiles]:
    """The distinct tile sets ``tiles`` with ``field`` set to each of ``values`` (``tiles`` itself first)."""
    out = [tiles]
    for v in values:
        t = _with(tiles, field, v)
        C, (_, d_l), _, (_, d_s), _, _ = t
        if t not in out and C % max(d_l, 1) == 0 and d_s <= C:  # a chunk is whole steps; a short row fits in one
            out.append(t)
    return out


def _key(x: Tensor, weight: Tensor | None, mean: bool, head_dim: int) -> tuple:
    """What measured tiles depend on besides the graph: width bucket, dtype, weight kind, mean, head width."""
    kind = None if weight is None else (weight.dim(), weight.dtype)
    return ("spmm_tiles", block_width(x.shape[1]), x.dtype, kind, mean, head_dim)


def tuned(csr: CSR, x: Tensor, weight: Tensor | None, mean: bool, head_dim: int) -> Tiles | None:
    """The tiles :func:`search` measured for inputs like these on ``csr``, or None.

    Shapes:
        x ``[*, F]``
    """
    hit = csr.peek(_key(x, weight, mean, head_dim))
    return None if hit is None else hit[0]


def timings(csr: CSR, x: Tensor, weight: Tensor | None, mean: bool, head_dim: int) -> dict[Tiles, float]:
    """Seconds of every tile set :func:`search` timed for inputs like these on ``csr`` (empty if none)."""
    hit = csr.peek(_key(x, weight, mean, head_dim))
    return {} if hit is None else dict(hit[1])


def search(csr: CSR, x: Tensor, weight: Tensor | None, mean: bool, head_dim: int,
           launch: Callable[[Tiles], object], timer: Callable[[Callable[[], object]], float] | None = None) -> Tiles:
    """The fastest tiles for these inputs by coordinate descent over :data:`TUNE_FIELDS`, kept on ``csr``.

    ``launch(tiles)`` runs the SpMM on these inputs with ``tiles``; ``timer(fn) -> seconds`` times
    one call (default: Triton's ``do_bench``, kernel time). Starts from :func:`tiles_for`; for each
    field in turn every option is timed with the others at their best so far and the fastest
    kept when it beats the best so far by :data:`MARGIN`; an option that fails to compile or run is
    skipped. A winner other than the start is timed again beside it and kept only if still faster by
    the margin.

    Shapes:
        x ``[*, F]``
    """
    key = _key(x, weight, mean, head_dim)
    best, _ = csr.cached(key, lambda: _descend(csr, key, tiles_for(x.shape[1]), launch, timer))
    return best


def _descend(csr: CSR, key: tuple, start: Tiles, launch: Callable[[Tiles], object],
             timer: Callable[[Callable[[], object]], float] | None) -> tuple[Tiles, dict[Tiles, float]]:
    if timer is None:
        from triton.testing import do_bench  # (no `import triton.testing` here: it would make `triton` local)

        def timer(fn) -> float:
            return do_bench(fn, warmup=3, rep=10) * 1e-3

    times: dict[Tiles, float] = {}

    def cost(tiles: Tiles) -> float:
        if tiles not in times:
            try:
                times[tiles] = timer(lambda: launch(tiles))
            except Exception as e:  # e.g. out of registers or shared memory on this GPU
                lines = str(e).strip().splitlines()
                log.info("spmm tiles %s skipped: %s", tiles, lines[-1] if lines else type(e).__name__)
                times[tiles] = float("inf")
        return times[tiles]

    best = start
    for field, values in TUNE_FIELDS:
        option = min(tile_options(best, field, values), key=cost)
        if cost(option) < cost(best) * (1 - MARGIN):
            best = option
    if cost(best) == float("inf"):
        raise RuntimeError(f"no SpMM tile set ran on {csr}")
    if best != start and cost(start) != float("inf"):  # confirmed back to back against the fixed tiles
        again = {t: timer(lambda t=t: launch(t)) for t in (start, best)}
        if not again[best] < again[start] * (1 - MARGIN):
            best = start
    log.info("spmm tiles on %s, %s: %s (%.1f us; default %.1f us)", csr, key[1:], best, 1e6 * times[best],
             1e6 * times[start])
    return best, times
