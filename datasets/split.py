"""Seeded per-class random split (Shchur et al. 2018: 20 train / 30 val per class, rest test)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from torch_geometric.data import Data


def per_class_split(
    y: torch.Tensor,
    num_classes: int,
    train_per_class: int = 20,
    val_per_class: int = 30,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random split with a fixed number of train and val nodes per class; the rest is test.

    Nodes with a negative label (unlabelled) are in no split. A class with fewer nodes
    than ``train_per_class + val_per_class`` gives what it has, train first.

    Args:
        y: labels; ``-1`` means unlabelled.
        num_classes: number of classes C.
        train_per_class: train nodes per class (default 20).
        val_per_class: val nodes per class (default 30).
        seed: seed of the permutation.

    Shapes:
        y: [N]  ->  train_mask, val_mask, test_mask: [N] bool.
    """
    yn = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    n = yn.shape[0]
    perm = np.random.default_rng(seed).permutation(n)
    perm = perm[np.argsort(yn[perm], kind="stable")]  # grouped by class, random inside
    ys = yn[perm]
    starts = np.searchsorted(ys, np.arange(num_classes + 1))
    first = np.zeros(n, dtype=np.int64)
    valid = ys >= 0
    first[valid] = starts[ys[valid]]
    rank = np.arange(n) - first  # position of the node inside its class
    train = np.zeros(n, dtype=bool)
    val = np.zeros(n, dtype=bool)
    test = np.zeros(n, dtype=bool)
    train[perm] = valid & (rank < train_per_class)
    val[perm] = (
        valid & (rank >= train_per_class) & (rank < train_per_class + val_per_class)
    )
    test[perm] = valid & (rank >= train_per_class + val_per_class)
    return torch.from_numpy(train), torch.from_numpy(val), torch.from_numpy(test)


def set_random_split(data: Data, seed: int = 0, **kw: int) -> Data:
    """Set ``train/val/test_mask`` on ``data`` with `per_class_split` and return it."""
    data.train_mask, data.val_mask, data.test_mask = per_class_split(
        data.y, data.num_classes, seed=seed, **kw
    )
    return data


def set_splits(data: Data, train: torch.Tensor, val: torch.Tensor, test: torch.Tensor, kind: str) -> Data:
    """Attach K splits to ``data`` (``train_masks``/``val_masks``/``test_masks``) and make split 0 current.

    Args:
        train, val, test: bool masks, one column per split.
        kind: ``"shipped"`` (the dataset's own splits) or ``"random"`` (seeded, `add_random_splits`).

    Shapes:
        train, val, test: [N, K] bool.
    """
    data.train_masks, data.val_masks, data.test_masks = train, val, test
    data.split_kind = kind
    data.train_mask, data.val_mask, data.test_mask = train[:, 0], val[:, 0], test[:, 0]
    return data


def num_splits(data: Data) -> int:
    """How many splits ``data`` holds (0: just its one set of masks)."""
    masks = getattr(data, "train_masks", None)
    return int(masks.shape[1]) if masks is not None else 0


def add_random_splits(data: Data, seed: int, count: int) -> Data:
    """Attach ``count`` seeded 20/30-per-class splits (seeds ``seed .. seed + count - 1``); split 0 is ``seed``'s.

    A dataset that ships its own splits keeps them: asking for random ones there is an error.
    """
    from gnndist.errors import UserError

    if getattr(data, "split_kind", None) == "shipped":
        raise UserError(f"{data.name} ships {num_splits(data)} splits: use --splits all or --split K, "
                        f"not --splits random")
    if data.y.dim() > 1:
        raise UserError(f"{data.name} is multi-label: per-class random splits (--splits random) need one label a node")
    masks = [per_class_split(data.y, data.num_classes, seed=seed + r) for r in range(count)]
    return set_splits(data, *(torch.stack([m[i] for m in masks], dim=1) for i in range(3)), kind="random")
