"""A folder of memory-mappable ``.npy`` arrays: the input format for graphs beyond memory.

    DIR/edge_index.npy   [2, E] int32 or int64   any order; self-loops and duplicates allowed, symmetrised
    DIR/x.npy            [N, F] float16/32/64    optional (structure only: x = [1, log(1 + degree)])
    DIR/y.npy            [N] int (-1 unlabelled) or [N, T] 0/1   optional (then all 0, has_labels False)
    DIR/train_mask.npy, val_mask.npy, test_mask.npy   [N] bool   optional (else the seeded 20/30 per class)
    DIR/meta.json        optional {"num_nodes": N, "num_classes": C, "name": ...}

Every array is opened with ``np.load(mmap_mode="r")``: nothing is read whole. ``N`` is the rows of
``x`` (else of ``y``, else ``meta.json``'s, else the largest id + 1). The `Data` it returns carries the
*raw* edge list (``data.raw_edges = True``): the partitioner symmetrises and cleans it in chunks
(:func:`gnndist.partition.book.symmetric_csr`), so the contract's sorted int64 ``edge_index`` is
never built. ``data.memmaps`` lists the mapped arrays, whose pages a reader may drop once it has
gathered what it needs (the partition writer does, after each part).

:func:`gnndist.datasets.sbm.write_synthetic` generates a ``synthetic-<N>[-d<deg>]`` graph straight into
this format in chunks (``gnndist synth NAME --out DIR``), so generating a benchmark graph is never the
memory peak; a ``synthetic-*`` name loads through such a folder (:func:`~gnndist.datasets.sbm.named_folder`).
"""

from __future__ import annotations

import json
import os.path as osp
import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError
from gnndist.machine import CHUNK

from .spec import register_format
from .split import per_class_split

if TYPE_CHECKING:
    from torch_geometric.data import Data

EDGES = "edge_index.npy"
MASKS = ("train_mask", "val_mask", "test_mask")


def is_npy_folder(path: str) -> bool:
    """True for a folder holding ``edge_index.npy`` with a ``.npy`` magic."""
    f = osp.join(path, EDGES)
    if not (osp.isdir(path) and osp.isfile(f)):
        return False
    with open(f, "rb") as fh:
        return fh.read(6) == b"\x93NUMPY"


def _open(path: str, what: str, kinds: str) -> np.memmap:
    """``np.load(path, mmap_mode="r")`` with a one-line error for a corrupt, truncated or wrong-dtype file."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:  # a truncated file ("mmap length is greater than file size"), a bad header
        with open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                shape, _, dtype = np.lib.format._read_array_header(f, version)
                want = f"{list(shape)} {dtype}: {int(np.prod(shape)) * dtype.itemsize:,} bytes of data"
                why = f"truncated: its header says {want}, the file holds {osp.getsize(path) - f.tell():,}"
            except Exception:
                why = f"not a readable .npy file ({e})"
        raise UserError(f"{path}: {why}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e.strerror or e})") from None
    if arr.dtype.kind not in kinds:
        names = {"i": "integer", "u": "unsigned", "f": "float", "b": "bool"}
        raise UserError(f"{path}: {what} must be {' or '.join(names[k] for k in kinds)}, got {arr.dtype}")
    return arr


def read_npy_folder(path: str, name: str, seed: int = 0) -> Data:
    """Open a ``.npy`` folder (see the module docstring) without reading its arrays whole.

    Shapes:
        x: [N, F]; y: [N] or [N, T]; edge_index: [2, E] raw (cleaned by the partitioner); masks: [N] bool.
    """
    meta = {}
    if osp.isfile(osp.join(path, "meta.json")):
        try:
            meta = json.loads(open(osp.join(path, "meta.json")).read())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{osp.join(path, 'meta.json')} is corrupt: {e}") from None
    ei = _open(osp.join(path, EDGES), "edge_index", "iu")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise UserError(f"{osp.join(path, EDGES)}: edge_index must have shape [2, E], got {list(ei.shape)}")
    arrays = {k: _open(osp.join(path, f"{k}.npy"), k, kinds) for k, kinds in
              (("x", "f"), ("y", "iub"), *((m, "b") for m in MASKS)) if osp.isfile(osp.join(path, f"{k}.npy"))}
    x, y = arrays.get("x"), arrays.get("y")
    if x is not None and x.ndim != 2:
        raise UserError(f"{path}/x.npy: features must be [N, F], got shape {list(x.shape)}")
    n = int(x.shape[0] if x is not None else y.shape[0] if y is not None else meta.get("num_nodes", -1))
    if n < 0:
        n = _max_id(ei) + 1
    if "num_nodes" in meta and int(meta["num_nodes"]) != n:
        raise UserError(f"{path}: meta.json says {meta['num_nodes']} nodes, x.npy/y.npy have {n} rows")
    for k, arr in arrays.items():
        if arr.shape[0] != n:
            raise UserError(f"{path}/{k}.npy has {arr.shape[0]:,} rows but the graph has {n:,} nodes "
                            f"(rows of {'x' if x is not None else 'y'}.npy)")
    mapped = list(arrays.values()) + [ei]
    with warnings.catch_warnings():  # read-only memory maps: torch warns that they are not writable
        warnings.simplefilter("ignore", UserWarning)
        edge_index = torch.from_numpy(ei)
        if x is None:
            deg = _degree(ei, n)
            x_t = torch.from_numpy(np.stack([np.ones(n, np.float32), np.log1p(deg).astype(np.float32)], 1))
        else:
            x_t = torch.from_numpy(x) if x.dtype == np.float32 else torch.from_numpy(np.asarray(x, np.float32))
        if y is None:
            y_t = torch.zeros(n, dtype=torch.int64)
        else:
            y_t = torch.from_numpy(y) if y.dtype == np.int64 else torch.from_numpy(np.asarray(y, np.int64))
    from torch_geometric.data import Data

    classes = int(meta.get("num_classes") or (y_t.shape[1] if y_t.dim() == 2 else int(y_t.max()) + 1 if n else 1))
    data = Data(x=x_t, y=y_t, edge_index=edge_index, num_nodes=n)
    data.name = meta.get("name", name)
    data.num_classes = max(classes, 1)
    data.raw_edges = True  # edge_index as stored: the partitioner symmetrises and cleans it in chunks
    data.memmaps = mapped
    if y is None:
        data.has_labels = False
    if all(m in arrays for m in MASKS):
        for m in MASKS:
            data[m] = torch.from_numpy(np.asarray(arrays[m]))
    elif y_t.dim() == 1:
        data.train_mask, data.val_mask, data.test_mask = per_class_split(y_t, data.num_classes, seed=seed)
    else:
        raise UserError(f"{path}: multi-label y needs train_mask.npy, val_mask.npy and test_mask.npy")
    return data


def _max_id(ei: np.ndarray) -> int:
    hi = -1
    for e0 in range(0, ei.shape[1], CHUNK):
        c = ei[:, e0 : e0 + CHUNK]
        hi = max(hi, int(c.max()) if c.size else -1)
    return hi


def _degree(ei: np.ndarray, n: int) -> np.ndarray:
    deg = np.zeros(n, dtype=np.int64)
    for e0 in range(0, ei.shape[1], CHUNK):
        src, dst = np.asarray(ei[0, e0 : e0 + CHUNK]), np.asarray(ei[1, e0 : e0 + CHUNK])
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise UserError(f"edge ids must lie in [0, {n}), found ids outside it")
        keep = src != dst
        deg += np.bincount(src[keep], minlength=n) + np.bincount(dst[keep], minlength=n)
    return deg


class NpyWriter:
    """One ``.npy`` file written front to back in chunks (header first), never held whole."""

    def __init__(self, path: str, shape: tuple[int, ...], dtype):
        self.f = open(path, "wb")
        self.dtype = np.dtype(dtype)
        np.lib.format.write_array_header_1_0(
            self.f, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape})
        self.start = self.f.tell()

    def write_at(self, item: int, values: np.ndarray) -> None:
        """Write ``values`` starting at flat element ``item``."""
        self.f.seek(self.start + item * self.dtype.itemsize)
        np.ascontiguousarray(values, dtype=self.dtype).tofile(self.f)

    def close(self) -> None:
        self.f.close()


register_format("npy", read_npy_folder, is_npy_folder)
