"""Social graphs in their authors' formats: MUSAE Facebook Page-Page (csv + json) and
Facebook100 (MATLAB ``.mat``, as used by LINKX)."""

from __future__ import annotations

import itertools
import json
import os.path as osp

import numpy as np
import pandas as pd
import scipy.io
from torch_geometric.data import Data

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .split import set_random_split

MUSAE_URL = "https://github.com/benedekrozemberczki/MUSAE/tree/master/input"
FB100_URL = (
    "https://github.com/CUAI/Non-Homophily-Large-Scale/tree/master/data/facebook100"
)
MUSAE_FILES = ("facebook_edges.csv", "facebook_target.csv", "facebook.json")


def is_musae_folder(path: str) -> bool:
    """True for a folder holding MUSAE's Facebook edges, targets and features."""
    return osp.isdir(path) and all(osp.isfile(osp.join(path, f)) for f in MUSAE_FILES)


def read_musae(path: str, name: str, seed: int = 0) -> Data:
    """Facebook Page-Page: label = ``page_type``; features = binary bag of feature ids.

    Shapes:
        x: [22470, 4714] float32 (dense); y: [22470]; edge_index: [2, 341646].
    """
    try:
        edges = pd.read_csv(osp.join(path, MUSAE_FILES[0])).to_numpy(dtype=np.int64)
        target = pd.read_csv(osp.join(path, MUSAE_FILES[1])).sort_values("id")
        with open(osp.join(path, MUSAE_FILES[2])) as f:
            feats = json.load(f)
    except Exception as e:
        raise UserError(
            f"{path}: cannot read MUSAE files ({type(e).__name__}: {e})"
        ) from e
    n = len(target)
    classes, y = np.unique(target["page_type"].to_numpy(), return_inverse=True)
    nodes = np.fromiter(map(int, feats.keys()), dtype=np.int64, count=len(feats))
    lens = np.fromiter(map(len, feats.values()), dtype=np.int64, count=len(feats))
    cols = np.fromiter(itertools.chain.from_iterable(feats.values()), dtype=np.int64)
    if nodes.size and (nodes.max() >= n or nodes.min() < 0):
        raise UserError(f"{path}: feature ids name nodes outside 0..{n - 1}")
    x = np.zeros(
        (n, int(cols.max()) + 1 if cols.size else 1), dtype=np.float32
    )  # [N, F]
    x[np.repeat(nodes, lens), cols] = 1.0
    data = make_data(x, y, clean_edges(edges[:, 0], edges[:, 1], n), name, len(classes))
    data.class_names = [str(c) for c in classes]
    return set_random_split(data, seed=seed)


def is_fb100(path: str) -> bool:
    """True for a ``.mat`` file with Facebook100's ``A`` and ``local_info``."""
    if not (osp.isfile(path) and path.endswith(".mat")):
        return False
    try:
        return {"A", "local_info"} <= {v[0] for v in scipy.io.whosmat(path)}
    except (ValueError, OSError, TypeError):
        return False


def read_fb100(path: str, name: str, seed: int = 0) -> Data:
    """Facebook100 graph: label = gender (0 = missing -> -1, unlabelled), features =
    one-hot of the six other ``local_info`` columns (LINKX's recipe).

    Shapes:
        local_info: [N, 7] -> x: [N, sum of distinct values per column]; y: [N].
    """
    try:
        mat = scipy.io.loadmat(path)
        adj, info = mat["A"].tocoo(), np.asarray(mat["local_info"], dtype=np.int64)
    except Exception as e:
        raise UserError(
            f"{path}: cannot read Facebook100 .mat ({type(e).__name__}: {e})"
        ) from e
    n = info.shape[0]
    if adj.shape != (n, n):
        raise UserError(
            f"{path}: shape mismatch: A is {adj.shape} but local_info has {n} rows"
        )
    y = info[:, 1] - 1  # gender 1/2 -> 0/1, missing -> -1
    blocks = []
    for col in (0, 2, 3, 4, 5, 6):  # a loop over 6 attribute columns, not nodes
        _, inv = np.unique(info[:, col], return_inverse=True)
        block = np.zeros((n, int(inv.max()) + 1), dtype=np.float32)
        block[np.arange(n), inv] = 1.0
        blocks.append(block)
    x = np.concatenate(blocks, axis=1)  # [N, F]
    data = make_data(x, y, clean_edges(adj.row, adj.col, n), name, 2)
    return set_random_split(data, seed=seed)


def load_musae(name: str, root: str, seed: int = 0) -> Data:
    """Facebook Page-Page from ``root/facebook_page_page/``."""
    folder = osp.join(root, "facebook_page_page")
    if not is_musae_folder(folder):
        raise UserError(
            f"{name}: need {', '.join(MUSAE_FILES)} in {folder}; get them from {MUSAE_URL}"
        )
    return read_musae(folder, name, seed)


def load_fb100(name: str, root: str, seed: int = 0) -> Data:
    """Facebook100 Cornell5 from ``root/fb100_cornell5/Cornell5.mat``."""
    path = osp.join(root, "fb100_cornell5", "Cornell5.mat")
    if not osp.isfile(path):
        raise UserError(f"{name}: no file at {path}; get Cornell5.mat from {FB100_URL}")
    return read_fb100(path, name, seed)
