"""Checks that a `Data` obeys the contract every other package relies on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gnndist.errors import UserError
from gnndist.files import drop_pages
from gnndist.machine import CHUNK

if TYPE_CHECKING:
    from torch_geometric.data import Data


def validate(data: Data) -> None:
    """Raise `UserError` with one line when ``data`` breaks the dataset contract.

    Checks shapes and dtypes, edge ids in range, finite features, labels in
    ``[0, num_classes)`` (``-1`` is allowed and means unlabelled) and mask sizes.

    Shapes:
        x: [N, F]; y: [N] (or [N, T] multi-label 0/1); edge_index: [2, E]; masks: [N].
    """
    name = getattr(data, "name", "dataset")
    x, y, ei = data.x, data.y, data.edge_index
    if x is None or y is None or ei is None:
        raise UserError(f"{name}: data needs x, y and edge_index")
    if x.dim() != 2:
        raise UserError(f"{name}: features must be 2-D [N, F], got shape {tuple(x.shape)}")
    n = x.size(0)
    if y.dim() not in (1, 2) or y.size(0) != n:
        raise UserError(f"{name}: labels have shape {tuple(y.shape)} but there are {n} nodes")
    _check_edges(data, name, n)
    _check_features(data, name)
    _check_labels(data, name)
    _check_masks(data, name, n)


def _check_edges(data: Data, name: str, n: int) -> None:
    """``edge_index``: ``[2, E]`` int64 (a ``.npy`` folder's raw list: int32 too), ids in ``[0, n)``."""
    ei = data.edge_index
    if ei.dim() != 2 or ei.size(0) != 2:
        raise UserError(f"{name}: edge_index must have shape [2, E], got {tuple(ei.shape)}")
    raw = bool(getattr(data, "raw_edges", False))  # a .npy folder's edge list: the partitioner checks its ids
    if ei.dtype != torch.int64 and not (raw and ei.dtype == torch.int32):
        raise UserError(f"{name}: edge_index must be int64, got {ei.dtype}")
    if ei.numel() and not raw:
        lo, hi = int(ei.min()), int(ei.max())
        if lo < 0 or hi >= n:
            raise UserError(f"{name}: edge ids out of range: found ids in [{lo}, {hi}] but there are {n} nodes "
                            f"(valid ids 0..{n - 1})")


def _check_features(data: Data, name: str) -> None:
    """Finite features, read in chunks of rows: no ``[N, F]`` temporary (``x`` may be memory-mapped)."""
    x = data.x
    if not x.is_floating_point():
        return
    rows = max(CHUNK // max(x.size(1), 1), 1)
    bad = 0
    for r in range(0, x.size(0), rows):
        bad += int((~torch.isfinite(x[r : r + rows])).any(dim=1).sum())
        for mm in getattr(data, "memmaps", ()):  # a memory-mapped x stays on disk
            drop_pages(mm)
    if bad:
        raise UserError(f"{name}: features contain NaN or Inf in {bad} node rows")


def _check_labels(data: Data, name: str) -> None:
    """Labels in ``[0, num_classes)`` (``-1``: unlabelled); multi-label: 0/1, one column per class."""
    y = data.y
    num_classes = getattr(data, "num_classes", None)
    if num_classes is None:
        raise UserError(f"{name}: data.num_classes is not set")
    if y.numel() and y.dim() == 2:  # multi-label: one 0/1 column per task
        if y.size(1) != num_classes or not bool(((y == 0) | (y == 1)).all()):
            raise UserError(f"{name}: multi-label y must be 0/1 with num_classes={num_classes} columns, got shape "
                            f"{tuple(y.shape)} with values in [{int(y.min())}, {int(y.max())}]")
    elif y.numel():
        lo, hi = int(y.min()), int(y.max())
        if lo < -1 or hi >= num_classes:
            raise UserError(f"{name}: labels out of range: found labels in [{lo}, {hi}] but num_classes is "
                            f"{num_classes} (valid 0..{num_classes - 1}, -1 = unlabelled)")


def _check_masks(data: Data, name: str, n: int) -> None:
    """The three masks: bool ``[n]``, no unlabelled node inside; several shipped splits: bool ``[n, K]`` each."""
    y = data.y
    for key in ("train_mask", "val_mask", "test_mask"):
        mask = getattr(data, key, None)
        if mask is None:
            raise UserError(f"{name}: {key} is missing")
        if mask.dtype != torch.bool or tuple(mask.shape) != (n,):
            raise UserError(f"{name}: {key} must be bool [{n}], got {mask.dtype} {tuple(mask.shape)}")
        if y.dim() == 1 and bool((y[mask] < 0).any()):
            raise UserError(f"{name}: {key} holds unlabelled nodes (label -1)")
    splits = [getattr(data, k, None) for k in ("train_masks", "val_masks", "test_masks")]  # [N, K] each, optional
    if any(s is not None for s in splits):
        k = splits[0].shape[1] if splits[0] is not None and splits[0].dim() == 2 else -1
        if any(s is None or s.dtype != torch.bool or tuple(s.shape) != (n, k) for s in splits):
            raise UserError(f"{name}: train_masks/val_masks/test_masks must be bool [{n}, K], got "
                            f"{[None if s is None else (s.dtype, tuple(s.shape)) for s in splits]}")
