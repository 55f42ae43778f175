"""A PyG `Data` saved with ``torch.save``, loaded with ``weights_only=True``."""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING

import torch

from gnndist.errors import UserError

from .graph import clean_edges, make_data, pyg_safe_globals
from .spec import register_format
from .split import set_random_split

if TYPE_CHECKING:
    from torch_geometric.data import Data


def is_torch_file(path: str) -> bool:
    """True for a ``torch.save`` zip archive (it holds ``<name>/data.pkl``)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any(n.endswith("/data.pkl") for n in z.namelist())


def read_torch_file(path: str, name: str, seed: int = 0) -> Data:
    """Load a saved `Data` (or a dict with the same keys) and bring it to the contract.

    Only tensors and PyG's own classes are unpickled (``weights_only=True``). Edges are
    cleaned; masks are kept when present, else the seeded 20/30-per-class split is used.

    Shapes:
        x: [N, F]; y: [N]; edge_index: [2, E].
    """
    from torch_geometric.data import Data

    try:
        with pyg_safe_globals():
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise UserError(
            f"{path}: cannot load as a saved PyG Data ({type(e).__name__}: {e})"
        ) from e
    if isinstance(obj, tuple) and obj and isinstance(obj[0], (Data, dict)):
        obj = obj[0]  # InMemoryDataset's (data, slices)
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    x, y, ei = get("x"), get("y"), get("edge_index")
    if not isinstance(ei, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise UserError(f"{path}: saved object needs tensors edge_index and y")
    n = int(y.size(0))
    if x is None:
        x = torch.ones(n, 1)
    if x.dim() != 2 or x.size(0) != n:
        raise UserError(
            f"{path}: shape mismatch: x is {tuple(x.shape)} but y has {n} rows"
        )
    if ei.dim() != 2 or ei.size(0) != 2:
        raise UserError(
            f"{path}: edge_index must have shape [2, E], got {tuple(ei.shape)}"
        )
    num_classes = get("num_classes")
    data = make_data(x, y, clean_edges(ei[0].numpy(), ei[1].numpy(), n), get("name") or name,
                     int(num_classes) if num_classes is not None else None)  # fmt: skip
    masks = [get(k) for k in ("train_mask", "val_mask", "test_mask")]
    if all(isinstance(m, torch.Tensor) for m in masks):
        data.train_mask, data.val_mask, data.test_mask = (
            m.to(torch.bool) for m in masks
        )
        return data
    return set_random_split(data, seed=seed)


register_format("pyg", read_torch_file, is_torch_file, fallback=1)  # after "hetero": both are torch.save zips
