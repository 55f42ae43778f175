"""What every Triton kernel file shares: interpreter state, accepted dtypes, tile configs.

Imported only by ``<op>/triton.py``, so the package imports without Triton.
"""

from __future__ import annotations

import torch
import triton
from torch import Tensor

# Triton decides at decoration time whether a kernel is compiled or interpreted.
INTERPRETED = bool(triton.knobs.runtime.interpret)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def why_not(*tensors: Tensor | None) -> str | None:
    """Reasons shared by the Triton kernels of every op: device vs. interpreter, dtype."""
    for t in tensors:
        if t is None:
            continue
        if t.device.type == "cpu" and not INTERPRETED:
            return "kernels were compiled for a GPU (TRITON_INTERPRET=1 was not set when they were imported)"
        if t.is_floating_point() and t.dtype not in DTYPES:
            return f"{t.dtype} is not supported (fp32, fp16, bf16; accumulation is fp32)"
    return None


def row_configs() -> list[triton.Config]:
    """Tiles for the row-parallel kernels (one destination row per program, a block of features).

    Autotuned per feature width; the interpreter gets one config (tuning there only costs time).
    """
    if INTERPRETED:
        return [triton.Config({"BLOCK_E": 32, "BLOCK_F": 128}, num_warps=4)]
    shapes = [(32, 32, 4), (64, 16, 4), (64, 32, 4), (128, 8, 4), (128, 16, 4), (128, 32, 8),
              (256, 8, 8), (256, 16, 8), (512, 4, 8), (512, 8, 8)]
    return [triton.Config({"BLOCK_F": f, "BLOCK_E": e}, num_warps=w) for f, e, w in shapes]


def prune_row_configs(configs, named_args, **kwargs):
    """Drop tiles much wider than the features (all lanes but a few would be masked)."""
    width = max(32, triton.next_power_of_2(int(named_args["F"])))
    kept = [c for c in configs if c.kwargs["BLOCK_F"] <= width]
    return kept or configs[:1]


def edge_configs() -> list[triton.Config]:
    """Tiles for the edge-parallel kernels (SDDMM): a block of edges times a block of features."""
    if INTERPRETED:
        return [triton.Config({"BLOCK_E": 32, "BLOCK_D": 32}, num_warps=4)]
    shapes = [(64, 32, 4), (128, 32, 4), (32, 64, 4), (64, 64, 4), (32, 128, 4), (16, 256, 8)]
    return [triton.Config({"BLOCK_E": e, "BLOCK_D": d}, num_warps=w) for e, d, w in shapes]


def prune_edge_configs(configs, named_args, **kwargs):
    width = max(32, triton.next_power_of_2(int(named_args["D"])))
    kept = [c for c in configs if c.kwargs["BLOCK_D"] <= width]
    return kept or configs[:1]
