"""Activation checkpointing of one block (``--recompute``), exact and counted.

A checkpointed block keeps only its inputs; backward runs its forward again (halo
exchanges included, counted by the byte counter like any other) and then its backward.
The recomputation is exact: dropout masks are hashes of (seed, epoch, key, node id),
not draws from a random stream, and batch-norm statistics are recomputed from the same
rows (running statistics are updated by the first forward only).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

from torch import Tensor
from torch.utils.checkpoint import checkpoint


def checkpointed(fn: Callable[..., Tensor], graph, *args: Tensor, enabled: bool = True) -> Tensor:
    """``fn(graph, *args)``, keeping only the inputs for backward when ``enabled`` (and grad is on).

    Uses ``torch.utils.checkpoint`` with ``use_reentrant=False``, so parameters and the
    graph need not be passed as tensors and the block's own backward runs unchanged.
    """
    if not enabled:
        return fn(graph, *args)
    return checkpoint(fn, graph, *args, use_reentrant=False,
                      context_fn=lambda: (nullcontext(), graph.context.recompute()))
