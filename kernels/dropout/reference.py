"""Partition-invariant dropout: masks derived from (seed, epoch, key, dataset node id, column).

A rank draws its mask from the ids of the nodes it owns, so the union of the masks of
P ranks is the mask of one process: training on P ranks equals training on one.
The hashes run in int32 arithmetic (wrapping multiplies, masked shifts):

- ``node_keys`` mixes each id with (seed, epoch, key) once per node (two 32-bit "lowbias32" finalisers);
- a dropout cell ``(i, j)`` draws 16 bits: one hash of ``node_key[i] ^ pair_key[j // 2]`` (a multiply, an
  xor-shift, a multiply) gives the 16-bit draws of the two columns ``2q`` and ``2q + 1`` (its low and high half),
  so a mask costs about three int32 passes over the cells where a full finaliser per cell cost fourteen;
  ``p`` is rounded to a multiple of ``2**-16``;
- ``cell_bits`` (a full finaliser per cell, 31 bits) draws the uniform integers of link prediction's negatives.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # the column multiplier of cell_bits and pair_keys
PAIR_SALT = 0xC2B2AE35  # added to a column pair's index before its finaliser (test_deep_models says why this one)
M1, M2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers (the pair hash uses them too)
MASK_RESOLUTION = 2**16  # a dropout cell's draw has 16 bits


def _mix_int(h: int) -> int:
    """The 32-bit finaliser on a Python int (for scalar keys)."""
    h &= _M32
    h ^= h >> 16
    h = (h * M1) & _M32
    h ^= h >> 15
    h = (h * M2) & _M32
    return h ^ (h >> 16)


def _as_i32(c: int) -> int:
    return c - (1 << 32) if c >= (1 << 31) else c


def _mix_i32(h: Tensor) -> Tensor:
    """The same finaliser on an int32 tensor (bit pattern = the uint32 value), in place.

    Shifts are logical (arithmetic shift, then mask); multiplies wrap modulo 2**32.
    """
    t = torch.empty_like(h)
    for shift, mult in ((16, M1), (15, M2), (16, None)):
        torch.bitwise_right_shift(h, shift, out=t)
        t &= (1 << (32 - shift)) - 1
        h ^= t
        if mult is not None:
            h *= _as_i32(mult)
    return h


def node_keys(ids: Tensor, seed: int, epoch: int, key: int) -> Tensor:
    """Per-node 32-bit keys mixing the dataset id with (seed, epoch, key). ``[n]`` int32."""
    k = _mix_int(seed ^ _mix_int(epoch ^ _mix_int(key ^ GOLDEN)))
    ids = ids.long()
    lo = (ids & _M32) ^ k
    node = _mix_i32((lo - ((lo >> 31) << 32)).to(torch.int32))
    node ^= (ids >> 32).to(torch.int32)
    return _mix_i32(node)


def cell_bits(keys: Tensor, cols: Tensor) -> Tensor:
    """31 random bits of the cells (node key, column); broadcasts like ``keys + cols``. int32 in ``[0, 2**31)``."""
    h = _mix_i32(keys + cols.to(torch.int32) * _as_i32(GOLDEN))
    h &= 0x7FFFFFFF
    return h


def pair_keys(width: int, device=None) -> Tensor:
    """The key of each column pair ``q`` (columns ``2q`` and ``2q + 1``): a finaliser of ``q``. ``[ceil(width / 2)]``
    int32."""
    q = torch.arange((width + 1) // 2, device=device, dtype=torch.int32)
    return _mix_i32(q * _as_i32(GOLDEN) + _as_i32(PAIR_SALT))


def mask_threshold(p: float) -> int:
    """A cell is dropped where its 16-bit draw is below this: ``p`` rounded to a multiple of ``2**-16``."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability {p} is outside [0, 1)")
    return round(p * MASK_RESOLUTION)


def _pair_hash(h: Tensor) -> Tensor:
    """The pair hash on ``node_key ^ pair_key`` (int32, in place): multiply, xor-shift by 16, multiply."""
    h *= _as_i32(M1)
    t = torch.bitwise_right_shift(h, 16)
    t &= 0xFFFF
    h ^= t
    h *= _as_i32(M2)
    return h


def cell_draws(keys: Tensor, cols: Tensor, width: int) -> Tensor:
    """The 16-bit draw of each cell (node key, column) of rows ``width`` wide, broadcasting like ``keys + cols``;
    int32 in ``[0, 2**16)``.

    The draw of column ``j`` is half ``j % 2`` (0: the low 16 bits) of the pair hash of ``j // 2``, its top bit
    flipped. :func:`drop_mask` computes the same draws of whole rows at once.
    """
    cols = cols.to(torch.int32)
    h = _pair_hash(keys ^ pair_keys(width, keys.device)[cols.long() >> 1])
    h = torch.bitwise_right_shift(h, (cols & 1) * 16) & 0xFFFF
    return h ^ 0x8000


def drop_mask(keys: Tensor, width: int, p: float) -> Tensor:
    """Where dropout with probability ``p`` drops: ``cell_draws(keys[i], j) < mask_threshold(p)``. ``[n, width]``
    bool.

    The rows' pair hashes are computed :data:`MASK_CHUNK` cells at a time and read as int16 halves (the signed
    half, compared with the threshold less ``2**15``, orders as the draw with its top bit flipped does).

    Shapes:
        keys ``[n]`` int32 -> ``[n, width]``
    """
    n = keys.shape[0]
    drop = torch.empty((n, width), dtype=torch.bool, device=keys.device)  # [n, F]
    if sys.byteorder != "little":  # the int16 view's halves are in memory order
        cols = torch.arange(width, device=keys.device, dtype=torch.int32)
        return torch.lt(cell_draws(keys[:, None], cols[None, :], width), mask_threshold(p), out=drop)
    pairs = pair_keys(width, keys.device)[None, :]  # [1, Q]
    threshold = mask_threshold(p) - 2**15
    step = max(1, MASK_CHUNK // max(pairs.shape[1], 1))
    for a in range(0, n, step):
        h = _pair_hash(keys[a : a + step, None] ^ pairs)  # [rows, Q]
        torch.lt(h.view(torch.int16)[:, :width], threshold, out=drop[a : a + step])  # [rows, 2Q] -> [rows, F]
    return drop


def hash_bits(ids: Tensor, width: int, seed: int, epoch: int, key: int) -> Tensor:
    """31 random bits for every (id, column), reproducible on any rank and device.

    Shapes:
        ids ``[n]`` int64 -> ``[n, width]`` int32 in ``[0, 2**31)``
    """
    cols = torch.arange(width, device=ids.device, dtype=torch.int32)  # [width]
    return cell_bits(node_keys(ids, seed, epoch, key)[:, None], cols[None, :])  # [n, width]


def hash_uniform(ids: Tensor, width: int, seed: int, epoch: int, key: int) -> Tensor:
    """Uniform numbers in [0, 1) for every (id, column). ``[n, width]`` float32."""
    return hash_bits(ids, width, seed, epoch, key).float() * (1.0 / 2**31)


def dropout_mask(ids: Tensor, width: int, p: float, seed: int, epoch: int, key: int) -> Tensor:
    """Keep-mask of dropout with probability ``p``. ``[n, width]`` bool."""
    return ~drop_mask(node_keys(ids, seed, epoch, key), width, p)


MASK_CHUNK = 2**20  # cells whose hash is computed at once: the int32 temporaries stay at 8 MiB, not 8 B per cell


def dropout(x: Tensor, keys: Tensor, p: float) -> Tensor:
    """Dropout of ``x`` with the mask of :func:`drop_mask`, in torch ops (the mask is kept for the backward).
    ``triton.py`` is the same in one fused pass; :func:`gnndist.kernels.dropout` picks.

    The mask is hashed in chunks of rows (:data:`MASK_CHUNK` cells), so the only whole-size tensors are the
    mask (1 B per cell) and the result.

    Shapes:
        x ``[n, F]``, keys ``[n]`` int32 -> ``[n, F]``
    """
    return apply_dropout(x, drop_mask(keys, x.shape[1], p), p)


def apply_dropout(x: Tensor, drop: Tensor, p: float) -> Tensor:
    """``x`` with the cells of ``drop`` zeroed and the rest scaled by ``1 / (1 - p)``; the backward keeps ``drop``
    (1 B per cell) and scales the gradient the same way.

    One multiply by fp32 factors (0 or the scale) in place of a scale and a ``masked_fill_``: a byte mask fill is
    a slow pass on the CPU (17 ms against 5 ms on a ``[18333, 256]`` fp32 tensor, 2 threads), and so is a multiply
    by the bool mask itself. The kept cells are bit-identical (``x`` times the fp32 scale, rounded once to ``x``'s
    dtype); a dropped cell is a zero of either sign.
    """
    return _KeepScale.apply(x, drop, 1.0 / (1.0 - p))


def _factors(drop: Tensor, scale: float) -> Tensor:
    """fp32 ``0`` where ``drop``, else ``scale`` (both exact: ``1 x -scale + scale`` and ``0 x -scale + scale``).
    ``[n, F]``. The mask converts through its bytes: on the CPU a ``bool -> float32`` copy is 5x slower than a
    ``uint8 -> float32`` one (2.4 ms against 0.46 ms for 4M cells, 2 threads)."""
    return drop.view(torch.uint8).to(torch.float32).mul_(-scale).add_(scale)


def _scaled(x: Tensor, drop: Tensor, scale: float) -> Tensor:
    """``x`` times :func:`_factors` in fp32 arithmetic (as ``x * scale`` is for a half ``x``), rounded once to
    ``x``'s dtype; the factors are made :data:`MASK_CHUNK` cells at a time, so the only temporary is 4 MiB."""
    out = torch.empty_like(x)
    step = max(1, MASK_CHUNK // max(x.shape[-1] if x.dim() > 1 else 1, 1))
    for a in range(0, x.shape[0], step):
        torch.mul(x[a : a + step], _factors(drop[a : a + step], scale), out=out[a : a + step])
    return out


class _KeepScale(torch.autograd.Function):
    """``x`` times :func:`_factors`, saving the byte mask (not the fp32 factors) for the backward."""

    @staticmethod
    def forward(ctx, x: Tensor, drop: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return _scaled(x, drop, scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (drop,) = ctx.saved_tensors
        return _scaled(grad, drop, ctx.scale), None, None
