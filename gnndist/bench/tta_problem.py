"""``gnndist bench tta``'s step 1: the one problem every side trains on, and gnndist's partition of it.

The graph as ``datasets.load`` gives it, as one symmetric CSR without self-loops or duplicates; the features
exactly as gnndist trains on them (row-normalised where none is negative, gnndist's default; every side then
trains with normalisation off), as CSR; the labels; the dataset's split when its training nodes are at least
:data:`MIN_TRAIN_NODES` and :data:`MIN_TRAIN_FRACTION` of the labelled ones, else a seeded random 60/20/20 split
of the labelled nodes, not stratified (:func:`export_problem`).
``problem.npz`` holds the arrays, ``problem.json`` the sha256 of each (:func:`load_problem` checks them); gnndist
trains on a 1-part partition made from exactly those arrays (:func:`gnndist_partition`, :func:`load_graph`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnndist.bench.tta_protocol import PROBLEM_ARRAYS, array_hashes, check_same
from gnndist.errors import UserError
from gnndist.files import atomic_file

MIN_TRAIN_NODES = 2048  # two default mini-batches: fewer training nodes make a mini-batch epoch a full batch
MIN_TRAIN_FRACTION = 0.05  # of the labelled nodes
SPLIT = (0.6, 0.2, 0.2)  # the random split of a dataset without one with enough training nodes
PROBLEM_FORMAT = 1


@dataclass(frozen=True)
class Problem:
    """The exported problem: its arrays (:data:`~gnndist.bench.tta_protocol.PROBLEM_ARRAYS`) and ``problem.json``."""

    path: Path  # problem.npz
    arrays: Mapping[str, np.ndarray]
    meta: Mapping

    @property
    def sha256(self) -> dict[str, str]:
        return dict(self.meta["sha256"])


def export_problem(dataset: str, root: str | None, seed: int, out_dir: str | Path) -> Path:
    """Write ``out_dir/problem.npz`` and ``out_dir/problem.json`` for ``dataset`` (see the module's step 1);
    returns the path of ``problem.npz``. Typed, multi-label, link and unlabelled graphs are refused."""
    import scipy.sparse as sp

    from gnndist.datasets import load
    from gnndist.dist.grid import ProcessGrid
    from gnndist.partition import csr_from_edge_index
    from gnndist.sparse_rows import normalize_rows

    data = load(dataset, root=root, seed=seed)
    name = getattr(data, "name", None) or dataset
    if getattr(data, "hetero", None) is not None or getattr(data, "link", None) is not None:
        raise UserError(f"bench tta: {name} is a typed graph or a link-prediction split; tta compares node "
                        f"classification on one node type")
    if data.y.dim() > 1 or not getattr(data, "has_labels", True):
        raise UserError(f"bench tta: {name} has no single label per node (multi-label or unlabelled)")
    n = int(data.num_nodes)
    csr = csr_from_edge_index(data.edge_index, n)  # symmetric, no self-loops or duplicates, sorted
    stored = torch.as_tensor(data.x, dtype=torch.float32)  # [N, F]
    x = normalize_rows(stored, ProcessGrid())  # gnndist's default: rows summing to 1 unless a feature is negative
    normalized = x is not stored
    xs = sp.csr_matrix(x.numpy())
    y = data.y.numpy().astype(np.int64)
    masks, split = _split(data, y, seed)
    arrays = {"indptr": csr.rowptr.astype(np.int64), "indices": csr.col.astype(np.int64),
              "x_indptr": xs.indptr.astype(np.int64), "x_indices": xs.indices.astype(np.int64),
              "x_data": xs.data.astype(np.float32), "x_shape": np.array(xs.shape, dtype=np.int64), "y": y, **masks}
    classes = int(getattr(data, "num_classes", None) or int(y.max()) + 1)
    meta = {"format": PROBLEM_FORMAT, "dataset": name, "seed": seed, "nodes": n, "entries": int(csr.col.size),
            "features": int(x.shape[1]), "feature_nonzeros": int(xs.nnz), "classes": classes,
            "out_width": 1 if classes == 2 else classes,  # gnndist's head: one logit for a binary task
            "features_normalized": normalized, "split": split,
            **{k.removesuffix("_mask"): int(v.sum()) for k, v in masks.items()}, "sha256": array_hashes(arrays)}
    out = Path(out_dir)
    with atomic_file(out / "problem.npz", "wb") as f:
        np.savez(f, **arrays)
    with atomic_file(out / "problem.json", "w") as f:
        f.write(json.dumps(meta, indent=1) + "\n")
    return out / "problem.npz"


def _split(data, y: np.ndarray, seed: int) -> tuple[dict[str, np.ndarray], str]:
    """The dataset's masks when they train on enough nodes, else a seeded random 60/20/20 of the labelled ones."""
    labelled = np.flatnonzero(y >= 0)
    own = getattr(data, "train_mask", None)
    if own is not None:
        train = int(own.sum())
        if train >= MIN_TRAIN_NODES and train >= MIN_TRAIN_FRACTION * labelled.size:
            return ({m: getattr(data, m).numpy().astype(bool) for m in ("train_mask", "val_mask", "test_mask")},
                    "the dataset's")
    perm = np.random.default_rng(seed).permutation(labelled)
    a = int(round(SPLIT[0] * perm.size))
    b = a + int(round(SPLIT[1] * perm.size))
    masks = {m: np.zeros(y.size, dtype=bool) for m in ("train_mask", "val_mask", "test_mask")}
    for m, ids in zip(masks, (perm[:a], perm[a:b], perm[b:])):
        masks[m][ids] = True
    return masks, f"random 60/20/20 of the labelled nodes, seed {seed}"


def load_problem(path: str | Path) -> Problem:
    """The problem at ``path`` (``problem.npz``, ``problem.json`` beside it), its hashes checked."""
    path = Path(path)
    meta = json.loads(path.with_name("problem.json").read_text())
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in PROBLEM_ARRAYS}
    check_same(meta["sha256"], array_hashes(arrays), who=str(path))
    return Problem(path, arrays, meta)


def problem_data(problem: Problem):
    """The problem as a ``torch_geometric.data.Data`` for gnndist's partitioner (dense features, the same values)."""
    import scipy.sparse as sp

    from gnndist.datasets.graph import make_data

    a = problem.arrays
    n = int(a["indptr"].size - 1)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(a["indptr"]))
    x = sp.csr_matrix((a["x_data"], a["x_indices"], a["x_indptr"]), shape=tuple(a["x_shape"])).toarray()  # [N, F]
    data = make_data(x, a["y"], torch.from_numpy(np.stack([rows, a["indices"]])), problem.meta["dataset"],
                     problem.meta["classes"])
    for m in ("train_mask", "val_mask", "test_mask"):
        setattr(data, m, torch.from_numpy(a[m].copy()))
    return data


def gnndist_partition(problem: Problem, out: Path) -> tuple[Path, float]:
    """The 1-part partition gnndist trains on, made from the problem's arrays; its folder and seconds."""
    from gnndist.partition import partition

    t0 = time.perf_counter()
    p = partition(problem_data(problem), 1, "random", progress=False)
    d = p.save(out, dataset=problem.meta["dataset"], progress=False)
    return d, time.perf_counter() - t0


def load_graph(partdir: Path):
    """The whole graph on this one process, features as stored (the problem's: no normalisation at load)."""
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    return DistGraph.load(partdir, ProcessGrid(), normalize_features=False)
