"""Edge cleaning and `Data` assembly shared by every loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError

if TYPE_CHECKING:
    from torch_geometric.data import Data


def pyg_safe_globals():
    """Context in which ``torch.load(weights_only=True)`` accepts PyG's `Data` internals.

    OGB calls plain ``torch.load`` on its processed file; with torch >= 2.6 that is
    ``weights_only=True`` and fails on these classes unless they are allowed.
    """
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    return torch.serialization.safe_globals(
        [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]
    )


def clean_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> torch.Tensor:
    """Drop self-loops, symmetrise, dedupe and sort an edge list by (row, col).

    Each pair is encoded as one int64 key ``row * num_nodes + col``, so one sort does
    the dedupe and the ordering at once.

    Args:
        src: source node ids.
        dst: destination node ids.
        num_nodes: number of nodes; ids must lie in ``[0, num_nodes)``.

    Shapes:
        src, dst: [E]  ->  edge_index: [2, E'] int64, both directions present.
    """
    src = np.asarray(src).astype(np.int64, copy=False).ravel()
    dst = np.asarray(dst).astype(np.int64, copy=False).ravel()
    if src.shape != dst.shape:
        raise UserError(f"edge list has {src.size} sources but {dst.size} destinations")
    check_edge_range(src, dst, num_nodes)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    n = np.int64(num_nodes)
    keys = np.concatenate([src * n + dst, dst * n + src])  # [2E]
    del src, dst, keep
    keys = torch.from_numpy(keys).unique(
        sorted=True
    )  # [E'] torch sort is multi-threaded
    return torch.stack([keys.div(n, rounding_mode="floor"), keys.remainder(n)])


def find_pairs(keys: np.ndarray, a: np.ndarray, b: np.ndarray, num_nodes: int) -> np.ndarray:
    """Where each pair ``(a, b)`` is in ``keys`` (pairs as ``row * num_nodes + col``, sorted ascending; the first of
    equal keys), else where its reverse ``(b, a)`` is; -1 where neither is. A symmetrised graph's edge finds the
    listed edge, or the one listed the other way round.

    Shapes:
        keys ``[K]``; a, b ``[M]`` -> ``[M]`` int64
    """
    n = np.int64(num_nodes)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    out = np.full(len(a), -1, dtype=np.int64)
    if not len(keys):
        return out
    for want in (a * n + b, b * n + a):  # the pair, else its reverse
        pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        hit = (out < 0) & (keys[pos] == want)
        out[hit] = pos[hit]
    return out


def summed_weights(edge_index: torch.Tensor, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                   num_nodes: int) -> torch.Tensor:
    """The weight of every edge of a cleaned ``edge_index`` (:func:`clean_edges` of ``src, dst``): the sum of
    ``weight`` over the listed edges ``src -> dst`` that equal it (duplicates add up, as a sparse matrix built from
    the list sums them: OGB's collab lists an author pair once per year), else over those of its reverse (a list
    that gives each undirected edge once).

    Shapes:
        edge_index ``[2, E']``; src, dst, weight ``[E]`` -> ``[E']`` float32
    """
    n = np.int64(num_nodes)
    src, dst = (np.asarray(a).astype(np.int64, copy=False).ravel() for a in (src, dst))
    w = np.asarray(weight, dtype=np.float64).ravel()
    keys, inverse = np.unique(src * n + dst, return_inverse=True)  # the listed directed pairs, sorted
    sums = np.bincount(inverse, weights=w, minlength=len(keys))  # [K] float64
    pos = find_pairs(keys, edge_index[0].numpy(), edge_index[1].numpy(), num_nodes)  # [E'] (clean_edges' own pairs)
    if (pos < 0).any():
        raise UserError(f"{int((pos < 0).sum())} edges of the graph are not in the weighted edge list")
    return torch.from_numpy(sums[pos].astype(np.float32))


def check_edge_range(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> None:
    """Raise `UserError` when an edge endpoint lies outside ``[0, num_nodes)``."""
    if src.size == 0:
        return
    lo = min(int(src.min()), int(dst.min()))
    hi = max(int(src.max()), int(dst.max()))
    if lo < 0 or hi >= num_nodes:
        raise UserError(
            f"edge ids out of range: found ids in [{lo}, {hi}] but the graph has "
            f"{num_nodes} nodes (valid ids 0..{num_nodes - 1})"
        )


def labels_to_zero_based(y: np.ndarray) -> np.ndarray:
    """Shift 1-based labels (min 1, max == number of distinct labels) to 0-based.

    BlogCatalog and Flickr (ANE) ship labels 1..C.
    """
    if y.size and y.ndim == 1 and y.min() == 1 and y.max() == np.unique(y).size:
        return y - 1
    return y


def make_data(
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    edge_index: torch.Tensor,
    name: str,
    num_classes: int | None = None,
) -> Data:
    """Assemble a `Data` with the dtypes every consumer expects (masks set by the caller).

    Shapes:
        x: [N, F] -> float32; y: [N] -> int64; edge_index: [2, E] int64.
    """
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    y = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y)
    x = x.to(torch.float32)
    y = y.to(torch.int64)
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y.numel() else 0
    from torch_geometric.data import Data

    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=x.size(0))
    data.name = name
    data.num_classes = int(num_classes)
    return data
