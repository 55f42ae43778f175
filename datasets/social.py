"""Social graphs in their authors' formats: MUSAE (Facebook Page-Page, GitHub, Twitch,
Wikipedia, Deezer, LastFM: csv + json) and Facebook100 (MATLAB ``.mat``, as used by LINKX)."""

from __future__ import annotations

import itertools
import json
import os
import os.path as osp
from typing import TYPE_CHECKING

import numpy as np

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .root import MissingFiles, registered_file
from .spec import Remote, register, register_format
from .split import set_random_split

if TYPE_CHECKING:
    import pandas as pd
    from torch_geometric.data import Data

MUSAE_URL = "https://github.com/benedekrozemberczki/MUSAE/tree/master/input"
FB100_URL = (
    "https://github.com/CUAI/Non-Homophily-Large-Scale/tree/master/data/facebook100"
)
MUSAE_FILES = ("facebook_edges.csv", "facebook_target.csv", "facebook.json")  # facebook-page-page's
GITHUB = "https://github.com"
MUSAE_RAW = f"{GITHUB}/benedekrozemberczki/MUSAE/raw/master/input"  # the download's URLs: <folder>/<file>
MUSAE_REMOTE = {"facebook_edges.csv": "edges", "facebook_target.csv": "target", "facebook.json": "features"}
FB100_RAW = f"{GITHUB}/CUAI/Non-Homophily-Large-Scale/raw/master/data/facebook100/Cornell5.mat"
# file -> (sha256, bytes), as the team's offline copies hold them (shared/data/README.md, each copied byte for byte
# from the repository its URL names)
HASHES = {
    "facebook.json": ("ea870537646a93642a0008d38aa9bfeff02018070ba97b1f3f469d9622626436", 2088766),
    "facebook_edges.csv": ("7c50d8f02a75cc0829577814a1fc14535164daa38d79c3612340c9e9cdbd4022", 1882610),
    "facebook_target.csv": ("7bd96eafea3c2ca40f44bfa9e73642194696c21e38c7b29ed409c32ad14075cd", 1177912),
    "Cornell5.mat": ("d9ff76ae34e855cb77b0779a3a320f7f73f848901cb13352e2734c17804c4aec", 3543757),
}
# A MUSAE set is three files named by its own prefix P: P_edges.csv (two id columns),
# P_target.csv (one row per node) and P_features.json or P.json ({node: [feature ids]}).
# SNAP's archives use P = musae_<set> (Twitch's DE/ENGB/ES/FR/PTBR/RU, git, facebook,
# Wikipedia's chameleon/crocodile/squirrel) or deezer_europe, lastfm_asia; the MUSAE
# repository's input/ uses P = <set> (facebook.json, as in facebook-page-page).
# The label is the first of these target columns the set has:
MUSAE_LABELS = {
    "page_type": "Facebook Page-Page: politician, government, tvshow or company page (4 classes)",
    "ml_target": "GitHub: machine-learning or web developer (2)",
    "mature": "Twitch: the streamer uses explicit language (2)",
    "target": "Deezer Europe (gender, 2), LastFM Asia (country, 18), Wikipedia (monthly traffic, cut into "
              "5 quantile classes), and any other set",
}
MUSAE_WIKIPEDIA = ("chameleon", "crocodile", "squirrel")  # regression targets: cut into quintiles
# the node id column: Twitch's ``id`` is the user's Twitch id, ``new_id`` the id the edges use
MUSAE_NODE_IDS = ("new_id", "id")


def find_musae(path: str) -> list[tuple[str, str, str, str]]:
    """The MUSAE sets at ``path`` (a folder, or one set's ``_edges.csv``): ``(set, edges, target, features)``.

    ``set`` is the prefix without ``musae_`` (``DE``, ``git``, ``facebook``, ``deezer_europe``).
    """
    if osp.isfile(path) and path.endswith("_edges.csv"):
        edge_files = [path]
    elif osp.isdir(path):
        edge_files = sorted(osp.join(path, f) for f in os.listdir(path) if f.endswith("_edges.csv"))
    else:
        return []
    sets = []
    for edges in edge_files:
        prefix = edges.removesuffix("_edges.csv")
        target = prefix + "_target.csv"
        features = next((f for f in (prefix + "_features.json", prefix + ".json") if osp.isfile(f)), None)
        if osp.isfile(target) and features is not None:
            sets.append((osp.basename(prefix).removeprefix("musae_"), edges, target, features))
    return sets


def is_musae(path: str) -> bool:
    """True for a folder holding a MUSAE set's edges, targets and features, or for that set's ``_edges.csv``."""
    return bool(find_musae(path))


def _musae_labels(target: pd.DataFrame, which: str, path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(class names, y)`` of a MUSAE target table in node order (see :data:`MUSAE_LABELS`)."""
    column = next((c for c in MUSAE_LABELS if c in target.columns), None)
    if column is None:
        raise UserError(f"{path}: no label column: it has {', '.join(map(str, target.columns))}; "
                        f"a MUSAE target file labels nodes in one of {', '.join(MUSAE_LABELS)}")
    values = target[column].to_numpy()
    if which in MUSAE_WIKIPEDIA and column == "target":  # average monthly traffic: 5 quantile classes
        cuts = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
        y = np.searchsorted(cuts, values, side="right")
        return np.array([f"traffic quintile {k}" for k in range(5)]), y
    return np.unique(values, return_inverse=True)


def read_musae(path: str, name: str, seed: int = 0) -> Data:
    """A MUSAE set (Facebook Page-Page, GitHub, Twitch, Wikipedia, Deezer, LastFM, ...): label =
    the set's target column (:data:`MUSAE_LABELS`); features = binary bag of feature ids.

    Shapes:
        x: [N, F] float32 (dense), F = largest feature id + 1; y: [N]; edge_index: [2, E].
        Facebook Page-Page: x [22470, 4714], edge_index [2, 341646].
    """
    sets = find_musae(path)
    if len(sets) != 1:
        found = ", ".join(s[0] for s in sets) or "none"
        raise UserError(f"{path}: {len(sets)} MUSAE sets ({found}); give one set's _edges.csv as the path")
    which, edges_file, target_file, features_file = sets[0]
    import pandas as pd

    try:
        edges = pd.read_csv(edges_file).to_numpy(dtype=np.int64)
        target = pd.read_csv(target_file)
        with open(features_file) as f:
            feats = json.load(f)
        nodes = np.fromiter(map(int, feats.keys()), dtype=np.int64, count=len(feats))
        lens = np.fromiter(map(len, feats.values()), dtype=np.int64, count=len(feats))
        cols = np.fromiter(map(int, itertools.chain.from_iterable(feats.values())), dtype=np.int64)
    except Exception as e:
        raise UserError(
            f"{path}: cannot read MUSAE files ({type(e).__name__}: {e})"
        ) from e
    if edges.ndim != 2 or edges.shape[1] < 2:
        raise UserError(f"{edges_file}: need two node id columns, got {edges.shape[1] if edges.ndim == 2 else 0}")
    id_col = next((c for c in MUSAE_NODE_IDS if c in target.columns), None)
    n = len(target)
    ids = target[id_col].to_numpy() if id_col else np.arange(n)
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(n)):
        raise UserError(f"{target_file}: node ids ({id_col}) are not 0..{n - 1}, one row each")
    classes, y = _musae_labels(target.iloc[order], which, target_file)
    if nodes.size and (nodes.max() >= n or nodes.min() < 0):
        raise UserError(f"{path}: feature ids name nodes outside 0..{n - 1}")
    if cols.size and cols.min() < 0:
        raise UserError(f"{features_file}: negative feature ids")
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
    import scipy.io

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
    import scipy.io

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
    if not all(osp.isfile(osp.join(folder, f)) for f in MUSAE_FILES):
        raise MissingFiles(
            f"{name}: need {', '.join(MUSAE_FILES)} in {folder}; get them from {MUSAE_URL}"
        )
    return read_musae(folder, name, seed)


def load_fb100(name: str, root: str, seed: int = 0) -> Data:
    """Facebook100 Cornell5 from ``root/fb100_cornell5/Cornell5.mat``."""
    path = registered_file(name, root, osp.join("fb100_cornell5", "Cornell5.mat"), FB100_URL, what="Cornell5.mat")
    return read_fb100(path, name, seed)


register("facebook-page-page", load_musae, files=tuple(
    Remote(f"{MUSAE_RAW}/{MUSAE_REMOTE[f]}/{f}", f"facebook_page_page/{f}", *HASHES[f]) for f in MUSAE_FILES),
    licence="GPL-3.0 (benedekrozemberczki/MUSAE)",
    citation="Rozemberczki, Allen & Sarkar, Multi-scale Attributed Node Embedding, Journal of Complex Networks 2021")
register("fb100-cornell5", load_fb100,
         files=(Remote(FB100_RAW, "fb100_cornell5/Cornell5.mat", *HASHES["Cornell5.mat"]),),
         licence="no licence file (CUAI/Non-Homophily-Large-Scale)",
         citation="Traud, Mucha & Porter, Social structure of Facebook networks, Physica A 2012")
register_format("musae", read_musae, is_musae)
register_format("fb100", read_fb100, is_fb100)
