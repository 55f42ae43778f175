"""A link-prediction split in the partition: each part's slice of every pair array and of the id directory.

Part ``k`` of ``P`` stores, for a split of ``n`` pairs, the pairs ``[k * n // P, (k + 1) * n // P)`` (dataset
ids, as the split has them) under ``link_<name>`` (``link_train``, ``link_valid``, ``link_valid_neg``, ...), and
``link_home``: the new ids of dataset ids ``[k * H, (k + 1) * H)``, ``H = ceil(N / P)``
(:class:`gnndist.tasks.pairs.Directory`). META.json's ``link`` says the split's metric, kind and counts.

With ``--use-valedges-as-input`` (OGB collab's test-time protocol) the partition also holds the sub-partition
:data:`VALEDGES` (``DIR/valedges/``, :func:`~gnndist.partition.format.write_partition`'s ``inner``): the same
book (owners, new ids, owned local ids) over the message graph of training *and* validation edges, both
directions (:func:`valedges_message`), never a test edge; only its structure (rows of ``A``, halo, plans, ids,
degrees), read by :meth:`gnndist.graph.DistGraph.sub_partition`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnndist.errors import UserError

LINK_PREFIX = "link_"
VALEDGES = "valedges"  # the sub-partition of the message graph of training + validation edges


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


def check_valedges(data, name: str) -> None:
    """A one-line :class:`UserError` where ``data`` cannot have the message graph of ``--use-valedges-as-input``:
    no edge split (a node task), no validation edges, edge features (which validation edges lack)."""
    split = link_of(data)
    if split is None:
        raise UserError(f"--use-valedges-as-input is for link prediction: {name} has no edge split (--task link, "
                        f"--edge-split TRAIN,VALID,TEST, or an ogbl-* dataset)")
    if split.valid.shape[0] == 0:
        raise UserError(f"--use-valedges-as-input: the edge split of {name} has no validation edges to add")
    if getattr(data, "edge_attr", None) is not None:
        raise UserError(f"--use-valedges-as-input: {name} has edge features, which its validation edges lack")


def valedges_message(data) -> Tensor:
    """The message graph of ``--use-valedges-as-input``: ``data``'s (the training edges) and its split's validation
    edges, dataset ids; the partition symmetrises and de-duplicates it as it does the training graph.

    Shapes:
        ``data.edge_index`` ``[2, E]``, validation ``[E_val, 2]`` -> ``[2, E + E_val]``
    """
    valid = link_of(data).valid.to(torch.int64)
    return torch.cat([torch.as_tensor(data.edge_index).to(torch.int64), valid.t()], dim=1)
