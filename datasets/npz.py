"""`.npz` graphs: Shchur et al. (Amazon/Coauthor, PyG raw layout and GraphGallery
re-packaging) and the Platonov et al. heterophily benchmark."""

from __future__ import annotations

import os.path as osp
import zipfile
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError

from .graph import clean_edges, labels_to_zero_based, make_data
from .root import MissingFiles, registered_file
from .spec import Remote, register, register_format
from .split import set_random_split, set_splits

if TYPE_CHECKING:
    import scipy.sparse as sp
    from torch_geometric.data import Data

GALLERY_URL = "https://github.com/EdisonLeeeee/GraphData/raw/master/datasets"
SHCHUR_URL = "https://github.com/shchur/gnn-benchmark/raw/master/data/npz"

# name -> (PyG class, PyG class name, PyG raw file, GraphGallery folder/file)
SHCHUR = {
    "amazon-photo": ("Amazon", "Photo", "amazon_electronics_photo.npz", "amazon_photo/amazon_photo.npz"),
    "amazon-computers": (
        "Amazon", "Computers", "amazon_electronics_computers.npz", "amazon_computers/amazon_cs.npz",
    ),
    "coauthor-cs": ("Coauthor", "CS", "ms_academic_cs.npz", "coauthor_cs/coauthor_cs.npz"),
    "coauthor-physics": ("Coauthor", "Physics", "ms_academic_phy.npz", "coauthor_physics/coauthor_phy.npz"),
}  # fmt: skip
GALLERY = {  # attributed graphs with no split, GraphGallery layout
    "blogcatalog": "blogcatalog/blogcatalog.npz",
    "flickr-ane": "flickr_ane/flickr.npz",
    "dblp": "dblp/dblp.npz",
}
HETEROPHILY = [
    "tolokers", "minesweeper", "chameleon-filtered", "squirrel-filtered", "chameleon",
    "squirrel", "actor", "cornell", "texas", "wisconsin",
]  # fmt: skip
HETEROPHILY_URL = (
    "https://github.com/yandex-research/heterophilous-graphs/raw/main/data"
)
# the five sets Platonov et al. (ICLR 2023) introduce: their recipe (gnndist.presets.heterophily); the binary ones are
# scored by ROC-AUC. roman-empire, amazon-ratings and questions are not registered: their files load as a path
PLATONOV = ("roman-empire", "amazon-ratings", "minesweeper", "tolokers", "questions")
PLATONOV_ROCAUC = ("minesweeper", "tolokers", "questions")
# path under the data root -> (sha256, bytes) of the files the team's offline copies hold (shared/data/README.md, each
# copied byte for byte from the repository its URL names); every other file is checked by its size and format
HASHES = {
    "blogcatalog/blogcatalog.npz": ("115be8c3396ae7db96c60df578c8c24ee46d2547ca62fa538ec9852c338df6c6", 1426499),
    "flickr_ane/flickr.npz": ("8eebe3fa74d66818d1977af8e13f8697b9710a4485b43ef5cbea305ce2eabc6a", 1280230),
    "dblp/dblp.npz": ("e1c460c864735b88158e230e715715b08a8f7bb7c94f7f6c3b5efc412558877d", 727093),
    "minesweeper/minesweeper.npz": ("e664c8dacf1e8ac466c2c09ed4b237bd2c5541f47a6eae9c6092cb87f16412b3", 135045),
    "chameleon_filtered/chameleon_filtered.npz": (
        "bf46f07e1fb5249280447e5fe3100f3e82fc4b93ad1e13ffcfdec924b6ac0bb5", 58924),
    "squirrel_filtered/squirrel_filtered.npz": (
        "f06370ffb3116c5de8b7a600005400b2293c025e0ce2f6916d8201a825505ac7", 208215),
    "chameleon/chameleon.npz": ("4c640bd2877fc4f9f101531e2f977bc16445a54e09a5cb01178df608e552f3fd", 177840),
    "squirrel/squirrel.npz": ("d436e3b42c0546b105241c0ab0766097074e68e55f67b133eeb9b0162e55cbd9", 704277),
    "actor/actor.npz": ("c350eef06b2c2a9bf8218be2b57cac6d4003d0922eb597a039e9123f75817816", 252956),
    "cornell/cornell.npz": ("684c54ba3daa13b0ba1f04a3d6dd1b1175c1ae9bdeb982851fd4ff96d3aac298", 30515),
    "texas/texas.npz": ("b164b99e6c3d43e4ab07488ec59bd8c815f90cbc1bd4cf425ce587d2b534d844", 28586),
    "wisconsin/wisconsin.npz": ("2543c89838cfc75f737f7c4664cc1d097f8268602c20b2d1bd4f21407df9c074", 41672),
}


def npz_keys(path: str) -> set[str]:
    """Array names in an ``.npz`` file, read without unpickling anything."""
    if not zipfile.is_zipfile(path):
        return set()
    with zipfile.ZipFile(path) as z:
        return {n.removesuffix(".npy") for n in z.namelist()}


def is_shchur(path: str) -> bool:
    """True for GraphGallery (``adj_matrix``) or original Shchur (``adj_data``) npz files."""
    keys = npz_keys(path)
    return bool(keys & {"adj_matrix", "adj_data"})


def is_heterophily(path: str) -> bool:
    """True for Platonov et al. npz files (``node_features``, ``edges``)."""
    return {"node_features", "edges"} <= npz_keys(path)


def _csr(z: np.lib.npyio.NpzFile, prefix: str) -> sp.csr_matrix:
    """Rebuild a CSR matrix stored as ``<prefix>_data/_indices/_indptr/_shape``."""
    import scipy.sparse as sp

    return sp.csr_matrix(
        (z[f"{prefix}_data"], z[f"{prefix}_indices"], z[f"{prefix}_indptr"]),
        shape=tuple(z[f"{prefix}_shape"]),
    )


def _item(z: np.lib.npyio.NpzFile, key: str):
    """Unwrap a 0-d object array (GraphGallery stores scipy matrices that way)."""
    v = z[key]
    return v.item() if v.dtype == object and v.ndim == 0 else v


def read_shchur(path: str, name: str, seed: int = 0) -> Data:
    """Load a Shchur-format npz (GraphGallery or original keys) with a 20/30-per-class split.

    The GraphGallery files hold pickled scipy matrices, so they are opened with
    ``allow_pickle=True``: only load files from a source you trust.

    Shapes:
        x: [N, F] float32 (dense); y: [N]; edge_index: [2, E] symmetric.
    """
    import scipy.sparse as sp

    try:
        with np.load(path, allow_pickle=True) as z:
            keys = set(z.files)
            if "adj_matrix" in keys:
                adj = sp.csr_matrix(_item(z, "adj_matrix"))
                attr = _item(z, "node_attr") if "node_attr" in keys else None
                labels = _item(z, "node_label") if "node_label" in keys else None
            else:
                adj = _csr(z, "adj")
                attr = (
                    _csr(z, "attr") if "attr_data" in keys else _item(z, "attr_matrix")
                )
                labels = _item(z, "labels") if "labels" in keys else None
    except UserError:
        raise
    except Exception as e:
        raise UserError(
            f"{path}: cannot read Shchur npz ({type(e).__name__}: {e})"
        ) from e
    if labels is None:
        raise UserError(f"{path}: npz has no node labels (node_label / labels)")
    if adj.shape[0] != adj.shape[1]:
        raise UserError(
            f"{path}: adjacency is {adj.shape[0]}x{adj.shape[1]}, not square"
        )
    n = adj.shape[0]
    labels = np.asarray(labels).astype(np.int64).ravel()
    if attr is None:
        x = np.ones((n, 1), dtype=np.float32)
    else:
        x = attr.toarray() if sp.issparse(attr) else np.asarray(attr)
    if x.shape[0] != n or labels.shape[0] != n:
        raise UserError(
            f"{path}: shape mismatch: adjacency has {n} nodes, features {x.shape[0]} rows, "
            f"labels {labels.shape[0]}"
        )
    coo = adj.tocoo()
    ei = clean_edges(coo.row, coo.col, n)
    y = labels_to_zero_based(labels)
    data = make_data(x, y, ei, name)
    return set_random_split(data, seed=seed)


def read_heterophily(path: str, name: str, seed: int = 0) -> Data:
    """Load a Platonov et al. heterophily npz with every shipped split; the masks are split 0.

    Shapes:
        node_features: [N, F]; edges: [E, 2] each undirected edge once; masks: [10, N].
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            x = z["node_features"]
            y = z["node_labels"].astype(np.int64)
            edges = z["edges"]
            masks = [
                z[k] if k in z.files else None
                for k in ("train_masks", "val_masks", "test_masks")
            ]
    except Exception as e:
        raise UserError(
            f"{path}: cannot read heterophily npz ({type(e).__name__}: {e})"
        ) from e
    n = x.shape[0]
    if y.shape[0] != n:
        raise UserError(
            f"{path}: shape mismatch: {n} feature rows but {y.shape[0]} labels"
        )
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise UserError(f"{path}: edges must have shape [E, 2], got {edges.shape}")
    data = make_data(x, y, clean_edges(edges[:, 0], edges[:, 1], n), name)
    if any(m is None for m in masks):
        return set_random_split(data, seed=seed)
    split = []
    for m in masks:
        m = m if m.ndim == 2 else m[None]  # [K, N]: one row per shipped split
        if m.ndim != 2 or m.shape[1] != n:
            raise UserError(f"{path}: masks must have {n} columns, got shape {m.shape}")
        split.append(torch.from_numpy(np.ascontiguousarray(m.astype(bool).T)))  # [N, K]
    if len({s.shape[1] for s in split}) != 1:
        raise UserError(f"{path}: train/val/test masks hold different numbers of splits "
                        f"({', '.join(str(s.shape[1]) for s in split)})")
    return set_splits(data, *split, kind="shipped")


def load_shchur(name: str, root: str, seed: int = 0) -> Data:
    """Amazon/Coauthor from PyG's raw layout ``root/<Name>/raw/<file>`` or GraphGallery's
    ``root/<folder>/<file>``."""
    _, cls_name, pyg_file, gallery = SHCHUR[name]
    pyg_path = osp.join(root, cls_name, "raw", pyg_file)
    gallery_path = osp.join(root, gallery)
    for path in (pyg_path, gallery_path):
        if osp.isfile(path):
            return read_shchur(path, name, seed)
    raise MissingFiles(
        f"{name}: no file at {pyg_path} (PyG layout, from {SHCHUR_URL}/{pyg_file}) "
        f"nor {gallery_path} (from {GALLERY_URL}/{osp.basename(gallery)})"
    )


def load_gallery(name: str, root: str, seed: int = 0) -> Data:
    """BlogCatalog / Flickr (ANE) / DBLP from ``root/<folder>/<file>.npz``."""
    path = registered_file(name, root, GALLERY[name], f"{GALLERY_URL}/{osp.basename(GALLERY[name])}")
    return read_shchur(path, name, seed)


def load_heterophily(name: str, root: str, seed: int = 0) -> Data:
    """Heterophily benchmark graph from ``root/<name>/<name>.npz`` (underscores)."""
    stem = name.replace("-", "_")
    path = registered_file(name, root, osp.join(stem, f"{stem}.npz"), f"{HETEROPHILY_URL}/{stem}.npz")
    return read_heterophily(path, name, seed)


def _remote(url: str, path: str) -> Remote:
    """A published file, with its sha256 and bytes where :data:`HASHES` has them."""
    return Remote(url, path, *HASHES.get(path, (None, None)))


SHCHUR_CITATION = "Shchur et al., Pitfalls of Graph Neural Network Evaluation, 2018"
for _name, (_family, _cls, _file, _gallery) in SHCHUR.items():
    _amazon = _family == "Amazon"
    register(_name, load_shchur, files=(_remote(f"{SHCHUR_URL}/{_file}", f"{_cls}/raw/{_file}"),),
             aliases=tuple(osp.basename(f).removesuffix(".npz").replace("_", "-") for f in (_file, _gallery)),
             licence="MIT (shchur/gnn-benchmark)", recipes={"node": "amazon"} if _amazon else {},
             citation=SHCHUR_CITATION + ("; McAuley et al., Image-based Recommendations on Styles and Substitutes, "
                                         "SIGIR 2015" if _amazon else ""))
for _name, _path in GALLERY.items():
    register(_name, load_gallery, files=(_remote(f"{GALLERY_URL}/{osp.basename(_path)}", _path),),
             licence="MIT (EdisonLeeeee/GraphData)",
             citation="Bojchevski & Guennemann, Deep Gaussian Embedding of Graphs, ICLR 2018" if _name == "dblp" else
             "Huang, Li & Hu, Accelerated Attributed Network Embedding, SDM 2017")
for _name in HETEROPHILY + [n for n in PLATONOV if n not in HETEROPHILY]:
    _stem = _name.replace("-", "_")
    register(_name, load_heterophily if _name in HETEROPHILY else None,
             files=(_remote(f"{HETEROPHILY_URL}/{_stem}.npz", f"{_stem}/{_stem}.npz"),) if _name in HETEROPHILY else (),
             licence="MIT (yandex-research/heterophilous-graphs)",
             citation="Platonov et al., A critical look at the evaluation of GNNs under heterophily, ICLR 2023",
             metric="rocauc" if _name in PLATONOV_ROCAUC else None,
             recipes={"node": "heterophily"} if _name in PLATONOV else {})
register_format("npz", read_shchur, is_shchur)
register_format("heterophily", read_heterophily, is_heterophily)
