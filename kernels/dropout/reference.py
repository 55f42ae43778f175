"""Partition-invariant dropout: masks derived from (seed, epoch, key, dataset node id, column).

A rank draws its mask from the ids of the nodes it owns, so the union of the masks of
P ranks is the mask of one process: training on P ranks equals training on one.
The hash runs in int32 arithmetic (wrapping multiplies, masked shifts): a 32-bit
"lowbias32" finaliser over ``node_key[id] + column``, where ``node_key`` mixes the id
with (seed, epoch, key) once per node.
"""

from __future__ import annotations

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF


def _mix_int(h: int) -> int:
    """The 32-bit finaliser on a Python int (for scalar keys)."""
    h &= _M32
    h ^= h >> 16
    h = (h * 0x7FEB352D) & _M32
    h ^= h >> 15
    h = (h * 0x846CA68B) & _M32
    return h ^ (h >> 16)


def _as_i32(c: int) -> int:
    return c - (1 << 32) if c >= (1 << 31) else c


def _mix_i32(h: Tensor) -> Tensor:
    """The same finaliser on an int32 tensor (bit pattern = the uint32 value), in place.

    Shifts are logical (arithmetic shift, then mask); multiplies wrap modulo 2**32.
    """
    t = torch.empty_like(h)
    for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
        torch.bitwise_right_shift(h, shift, out=t)
        t &= (1 << (32 - shift)) - 1
        h ^= t
        if mult is not None:
            h *= _as_i32(mult)
    return h


def node_keys(ids: Tensor, seed: int, epoch: int, key: int) -> Tensor:
    """Per-node 32-bit keys mixing the dataset id with (seed, epoch, key). ``[n]`` int32."""
    k = _mix_int(seed ^ _mix_int(epoch ^ _mix_int(key ^ 0x9E3779B9)))
    ids = ids.long()
    lo = (ids & _M32) ^ k
    node = _mix_i32((lo - ((lo >> 31) << 32)).to(torch.int32))
    node ^= (ids >> 32).to(torch.int32)
    return _mix_i32(node)


def cell_bits(keys: Tensor, cols: Tensor) -> Tensor:
    """31 random bits of the cells (node key, column); broadcasts like ``keys + cols``. int32 in ``[0, 2**31)``."""
    h = _mix_i32(keys + cols.to(torch.int32) * _as_i32(0x9E3779B9))
    h &= 0x7FFFFFFF
    return h


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
    return hash_bits(ids, width, seed, epoch, key) >= int(p * 2**31)


MASK_CHUNK = 2**20  # cells whose hash is computed at once: the int32 temporaries stay at 8 MiB, not 8 B per cell


def dropout(x: Tensor, keys: Tensor, p: float) -> Tensor:
    """Dropout of ``x`` with the mask of ``cell_bits(keys[i], j) < p * 2**31``, in torch ops (the mask is kept for
    the backward). ``triton.py`` is the same in one fused pass; :func:`gnndist.kernels.dropout` picks.

    The mask is hashed in chunks of rows (:data:`MASK_CHUNK` cells), so the only whole-size tensors are the
    mask (1 B per cell) and the result.

    Shapes:
        x ``[n, F]``, keys ``[n]`` int32 -> ``[n, F]``
    """
    n, width = x.shape
    cols = torch.arange(width, device=x.device, dtype=torch.int32)[None, :]  # [1, F]
    threshold = int(p * 2**31)
    drop = torch.empty((n, width), dtype=torch.bool, device=x.device)  # [n, F]
    step = max(1, MASK_CHUNK // max(width, 1))
    for a in range(0, n, step):
        torch.lt(cell_bits(keys[a : a + step, None], cols), threshold, out=drop[a : a + step])
    return apply_dropout(x, drop, p)


def apply_dropout(x: Tensor, drop: Tensor, p: float) -> Tensor:
    """``x`` with the cells of ``drop`` zeroed and the rest scaled by ``1 / (1 - p)``; the backward keeps ``drop``
    (1 B per cell) and scales the gradient the same way.

    One multiply by fp32 factors (0 or the scale) in place of a scale and a ``masked_fill_``: a byte mask fill is
    a slow pass on the CPU (17 ms against 5 ms on a ``[18333, 256]`` fp32 tensor, 2 threads). The kept cells are
    bit-identical (``x`` times the fp32 scale, rounded once to ``x``'s dtype); a dropped cell is a zero of either
    sign.
    """
    return _KeepScale.apply(x, drop, 1.0 / (1.0 - p))


def _factors(drop: Tensor, scale: float) -> Tensor:
    """fp32 ``0`` where ``drop``, else ``scale``. ``[n, F]``."""
    return torch.logical_not(drop).to(torch.float32).mul_(scale)


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
