"""A link-prediction split in the partition: each part's slice of every pair array and of the id directory.

Part ``k`` of ``P`` stores, for a split of ``n`` pairs, the pairs ``[k * n // P, (k + 1) * n // P)`` (dataset
ids, as the split has them) under ``link_<name>`` (``link_train``, ``link_valid``, ``link_valid_neg``, ...), and
``link_home``: the new ids of dataset ids ``[k * H, (k + 1) * H)``, ``H = ceil(N / P)``
(:class:`gnndist.tasks.pairs.Directory`). META.json's ``link`` says the split's metric, kind and counts.
"""

from __future__ import annotations

import numpy as np

LINK_PREFIX = "link_"


def link_of(data):
    """The :class:`~gnndist.datasets.edge_split.EdgeSplit` a loaded graph carries (``data.link``), else None."""
    return data.link if "link" in data else None


def pair_slice(n: int, rank: int, parts: int) -> tuple[int, int]:
    """Part ``rank``'s range ``[lo, hi)`` of ``n`` pairs split into ``parts`` contiguous slices."""
    return rank * n // parts, (rank + 1) * n // parts


def link_arrays(split, old2new: np.ndarray, rank: int, parts: int) -> dict[str, np.ndarray]:
    """Part ``rank``'s arrays of the :class:`~gnndist.datasets.edge_split.EdgeSplit` ``split``.

    Shapes:
        old2new ``[N]`` int64 (the book's)  ->  ``link_home`` ``[<= ceil(N / P)]``; ``link_<name>`` a slice of rows
    """
    out = {}
    for name, arr in split.arrays().items():
        lo, hi = pair_slice(arr.shape[0], rank, parts)
        out[LINK_PREFIX + name] = np.ascontiguousarray(arr[lo:hi].numpy())
    per = -(-len(old2new) // parts)
    out[LINK_PREFIX + "home"] = np.ascontiguousarray(old2new[rank * per : (rank + 1) * per])
    return out


def link_bytes(split, num_nodes: int) -> int:
    """What the split's arrays take on disk (every part together)."""
    return num_nodes * 8 + sum(a.numel() * a.element_size() for a in split.arrays().values())
