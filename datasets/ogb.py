"""OGB node property prediction through `ogb.nodeproppred.PygNodePropPredDataset`,
and `write_ogb`, which saves any `Data` in OGB's raw layout so that path is tested offline.

``ogbn-proteins`` has no node features and 112 binary tasks: ``x`` is the mean of the
8-dim features of a node's edges (as in OGB's examples), ``y`` is int64 ``[N, 112]``
with ``data.multilabel = True`` and ``num_classes = 112``.

``ogbn-mag`` is heterogeneous (OGB's ``is hetero``): its raw folder holds ``num-node-dict.csv.gz`` (a header
of the node types, one row of counts), ``triplet-type-list.csv.gz`` (one ``src,rel,dst`` row per relation),
``relations/<src>___<rel>___<dst>/{edge,num-edge-list,edge_reltype}.csv.gz``,
``node-feat/paper/{node-feat,node_year}.csv.gz``, ``nodetype-has-label.csv.gz`` and
``node-label/paper/node-label.csv.gz``; its split ``split/time/nodetype-has-split.csv.gz`` and
``split/time/paper/{train,valid,test}.csv.gz`` (ids within the type). OGB's own reader turns those into
dicts by type, which become a ``HeteroData`` and then the union graph of :mod:`.hetero` (reverse relations
added, ``data.hetero`` its schema; the target type is ``paper``, the one with labels).

OGB converts the raw files once into ``<folder>/processed/``. A folder of data that is not
ours (outside the data root: a ``--root`` or a path elsewhere, e.g. a shared read-only
dataset folder) is never written to: OGB then processes into a shadow folder
``<data root>/ogb/<hash>/<name>`` whose entries link to the original's (see
:func:`_processing_folder`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import os.path as osp
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnndist.errors import UserError

from .graph import clean_edges, make_data, pyg_safe_globals
from .root import MissingFiles, default_root
from .spec import Remote, register, register_format

if TYPE_CHECKING:
    from torch_geometric.data import Data

OGB_CITATION = "Hu et al., Open Graph Benchmark: Datasets for Machine Learning on Graphs, NeurIPS 2020"
# what ogb.stanford.edu gives each dataset: (licence, OGB's Evaluator's metric: tests/test_dataset_spec.py checks it)
OGBN = {
    "ogbn-arxiv": ("ODC-BY", "acc"), "ogbn-products": ("Amazon license", "acc"), "ogbn-proteins": ("CC-0", "rocauc"),
    "ogbn-papers100M": ("ODC-BY", "acc"), "ogbn-mag": ("ODC-BY", "acc"),
}  # fmt: skip
OGB_NAMES = list(OGBN)
META_FILE = "gnndist_meta.json"  # written by write_ogb: the meta_dict OGB needs for a custom name


def ogb_folder(name: str, root: str, meta: dict[str, str], missing_of, reader: str) -> str:
    """The folder of OGB's dataset ``name`` under ``root`` (its ``_pyg`` twin where there is one), once
    ``missing_of(folder, meta)`` finds nothing missing; else `MissingFiles` with the command that fetches it
    (``reader``: OGB's class, ``"nodeproppred import PygNodePropPredDataset"`` or the link one)."""
    dir_name = name.replace("-", "_")
    if osp.isdir(osp.join(root, dir_name + "_pyg")):
        dir_name += "_pyg"
    folder = osp.join(root, dir_name)
    missing = missing_of(folder, meta)
    if missing:
        raise MissingFiles(
            f"{name}: missing {', '.join(missing)} under {folder}; on a machine with internet run "
            f'python -c "from ogb.{reader} as D; '
            f"D('{name}', root='{root}')\" (or unzip {meta['url']} into {root} and rename "
            f"{meta['download_name']} to {dir_name})"
        )
    return folder


def _master(name: str) -> dict[str, str]:
    """OGB's own row of ``master.csv`` for ``name``."""
    import pandas as pd
    from ogb.nodeproppred import dataset_pyg

    path = osp.join(osp.dirname(dataset_pyg.__file__), "master.csv")
    master = pd.read_csv(path, index_col=0, keep_default_na=False)
    return {k: str(v) for k, v in master[name].items()}


def _raw_complete(folder: str, meta: dict[str, str]) -> list[str]:
    """Files OGB needs in ``folder`` that are missing (empty when it can load)."""
    if osp.isfile(osp.join(folder, "processed", "geometric_data_processed.pt")):
        need = []
    elif meta.get("binary") == "True":
        need = ["raw/data.npz", "raw/node-label.npz"]
    elif meta.get("is hetero") == "True":
        need = ["raw/num-node-dict.csv.gz", "raw/triplet-type-list.csv.gz", "raw/nodetype-has-label.csv.gz"]
    else:
        need = ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
                "raw/node-label.csv.gz"]  # fmt: skip
        if meta.get("has_node_attr") == "True":
            need.append("raw/node-feat.csv.gz")
    need.append(f"RELEASE_v{meta['version']}.txt")  # without it OGB prompts on stdin
    need.append(osp.join("split", meta["split"]))
    return [f for f in need if not osp.exists(osp.join(folder, f))]


def _from_ogb(ds, name: str, split_name: str, target: str | None = None) -> Data:
    """Turn an OGB PyG dataset into the contract's `Data` (official split); a heterogeneous one into its union
    graph (``target``: the labelled type, as ``--target``)."""
    if ds.is_hetero:
        return _from_ogb_hetero(ds, name, split_name, target)
    raw = ds[0]
    n = raw.num_nodes
    src, dst = raw.edge_index[0], raw.edge_index[1]
    if raw.x is not None:
        x = raw.x.to(torch.float32)
    elif getattr(raw, "edge_attr", None) is not None:  # ogbn-proteins
        ea = raw.edge_attr.to(torch.float32)
        x = torch.zeros(n, ea.size(1)).index_add_(0, dst, ea)
        x /= (
            torch.bincount(dst, minlength=n).clamp(min=1).unsqueeze(1).to(torch.float32)
        )
    else:
        x = torch.ones(n, 1)
    y = raw.y
    multilabel = y.dim() == 2 and y.size(1) > 1
    if y.is_floating_point():  # NaN marks unlabelled nodes (papers100M)
        y = torch.where(torch.isnan(y), torch.full_like(y, -1), y)
    y = y.to(torch.int64)
    if not multilabel:
        y = y.view(-1)
    ei = clean_edges(src.numpy(), dst.numpy(), n)
    num_classes = int(y.size(1)) if multilabel else int(ds.num_classes)
    data = make_data(x, y, ei, name, num_classes)
    if multilabel:
        data.multilabel = True
    if getattr(raw, "edge_attr", None) is not None:  # kept for models that read edge features (--model gine)
        data.edge_attr = raw.edge_attr.to(torch.float32)  # [E_raw, D], aligned with ...
        data.edge_attr_index = raw.edge_index  # ... the raw edge list (the partition maps them onto its CSR)
    try:
        idx = ds.get_idx_split(split_name)
    except Exception as e:  # missing or empty split files
        raise UserError(
            f"{name}: cannot read split/{split_name} ({type(e).__name__}: {e})"
        ) from e
    for key, part in (
        ("train_mask", "train"),
        ("val_mask", "valid"),
        ("test_mask", "test"),
    ):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.as_tensor(idx[part], dtype=torch.long)] = True
        setattr(data, key, mask)
    return data


def _from_ogb_hetero(ds, name: str, split_name: str, target: str | None) -> Data:
    """OGB's dicts by type (``num_nodes_dict``, ``edge_index_dict``, ``x_dict``, ``y_dict``, the split's ids within
    each labelled type) as a ``HeteroData``, then its union graph (:func:`.hetero.from_hetero`)."""
    from torch_geometric.data import HeteroData

    from .hetero import from_hetero

    raw = ds[0]
    hd = HeteroData()
    for t, n in raw.num_nodes_dict.items():
        hd[t].num_nodes = int(n)
    for t, x in (getattr(raw, "x_dict", None) or {}).items():
        hd[t].x = x.to(torch.float32)
    for t, y in raw.y_dict.items():
        hd[t].y = y.view(-1).to(torch.int64)
    for et, ei in raw.edge_index_dict.items():
        hd[tuple(et)].edge_index = ei.to(torch.int64)
    try:
        idx = ds.get_idx_split(split_name)
    except Exception as e:  # missing or empty split files
        raise UserError(f"{name}: cannot read split/{split_name} ({type(e).__name__}: {e})") from e
    for key, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        for t, ids in idx[part].items():
            mask = torch.zeros(int(raw.num_nodes_dict[t]), dtype=torch.bool)
            mask[torch.as_tensor(ids, dtype=torch.long)] = True
            hd[t][key] = mask
    return from_hetero(hd, name, target, num_classes=int(ds.num_classes))


PROCESSED = osp.join("processed", "geometric_data_processed.pt")  # what PygNodePropPredDataset writes


def _processing_folder(folder: str) -> str:
    """The folder OGB may write ``processed/`` into for the dataset in ``folder``.

    ``folder`` itself when it holds the processed file already (OGB only reads it then) or lies
    in the data root (:func:`gnndist.datasets.default_root`); otherwise a shadow
    ``<data root>/ogb/<hash of folder's path>/<folder's name>`` whose entries are links to
    ``folder``'s (all but ``processed``), made once.
    """
    real = osp.realpath(folder)
    data_root = osp.realpath(default_root())
    if osp.isfile(osp.join(real, PROCESSED)) or real == data_root or real.startswith(data_root + os.sep):
        return folder
    shadow = osp.join(data_root, "ogb", hashlib.sha256(real.encode()).hexdigest()[:8], osp.basename(real))
    try:
        os.makedirs(shadow, exist_ok=True)
        for entry in sorted(os.listdir(real)):
            link = osp.join(shadow, entry)
            if entry != "processed" and not osp.lexists(link):
                os.symlink(osp.join(real, entry), link)
    except OSError as e:
        raise UserError(f"{folder}: cannot prepare OGB's processed copy in {shadow} ({e.strerror}); "
                        "set $GNNDIST_DATA to a writable folder") from e
    return shadow


def _open_dataset(name: str, root: str, meta_dict: dict | None):
    """`PygNodePropPredDataset`, with its chatter on stdout silenced and errors as UserError."""
    from ogb.nodeproppred import PygNodePropPredDataset

    try:
        with contextlib.redirect_stdout(io.StringIO()), pyg_safe_globals():
            return PygNodePropPredDataset(name, root=root, meta_dict=meta_dict)
    except Exception as e:
        raise UserError(
            f"{name}: OGB cannot load the files ({type(e).__name__}: {e})"
        ) from e


def load_ogb(name: str, root: str, seed: int = 0, target: str | None = None) -> Data:
    """A registered ``ogbn-*`` dataset from ``root/ogbn_<name>/`` (OGB's layout), official split (``target``: the
    labelled type of ``ogbn-mag``).

    Missing files raise `MissingFiles` with the command that fetches them (the registry then downloads OGB's zip
    from ``master.csv``'s URL and unpacks it as ``root/ogbn_<name>``).
    """
    name = next(n for n in OGB_NAMES if n.lower() == name.lower())
    meta = _master(name)
    folder = ogb_folder(name, root, meta, _raw_complete, "nodeproppred import PygNodePropPredDataset")
    ds = _open_dataset(name, osp.dirname(_processing_folder(folder)), None)
    with pyg_safe_globals():
        return _from_ogb(ds, name, meta["split"], target)


def is_ogb_folder(path: str) -> bool:
    """True for a folder holding OGB's ``raw/`` (or ``processed/``) and ``split/``."""
    return (
        osp.isdir(osp.join(path, "split"))
        and (osp.isdir(osp.join(path, "raw")) or osp.isdir(osp.join(path, "processed")))
    )  # fmt: skip


def read_ogb_folder(path: str, name: str, seed: int = 0, target: str | None = None) -> Data:
    """Load an OGB folder: one `write_ogb` wrote, or an official ``ogbn_*`` download (``ogbn_mag``: ``target``, the
    labelled type)."""
    path = osp.abspath(path)
    meta_path = osp.join(path, META_FILE)
    if osp.isfile(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        meta["dir_path"] = path
        ogb_name = meta.pop("name", name)
    else:
        ogb_name = osp.basename(path).removesuffix("_pyg").replace("_", "-")
        known = {n.lower(): n for n in OGB_NAMES}
        if ogb_name.lower() not in known:
            raise UserError(
                f"{path}: OGB folder without {META_FILE}; its name must be one of "
                f"{', '.join(n.replace('-', '_') for n in OGB_NAMES)}"
            )
        ogb_name = known[ogb_name.lower()]
        meta = _master(ogb_name)
        meta["dir_path"] = path
    missing = _raw_complete(path, meta)
    if missing:
        raise UserError(f"{path}: OGB folder lacks {', '.join(missing)}")
    meta["dir_path"] = _processing_folder(path)
    ds = _open_dataset(ogb_name, "", meta)
    with pyg_safe_globals():
        return _from_ogb(ds, ogb_name, meta["split"], target)


def _write_csv(array: np.ndarray, path: str, float_format: str | None = None) -> None:
    """One gzipped headerless CSV, fast compression."""
    import pandas as pd

    pd.DataFrame(array).to_csv(
        path, header=False, index=False, float_format=float_format,
        compression={"method": "gzip", "compresslevel": 1},
    )  # fmt: skip


def write_ogb(data: Data, root: str, name: str) -> str:
    """Save ``data`` in OGB's raw layout so `PygNodePropPredDataset` loads it offline.

    Writes ``<root>/<name with underscores>/raw/{edge,node-feat,node-label,num-node-list,
    num-edge-list}.csv.gz``, ``split/<split>/{train,valid,test}.csv.gz`` (``random``, or
    OGB's split name when ``name`` is an official one),
    ``RELEASE_v1.txt`` and ``gnndist_meta.json`` (the ``meta_dict`` OGB needs for a name
    outside its master table), and ``raw/edge-feat.csv.gz`` when ``data.edge_attr`` exists
    (one row per edge of ``data.edge_index``). Features are written with 9 significant
    digits, which round-trips float32 exactly.

    Args:
        data: a graph with x, y, edge_index and the three masks.
        root: parent folder.
        name: dataset name, e.g. ``ogbn-mygraph``.

    Shapes:
        edge_index: [2, E] written as E rows; x: [N, F]; y: [N] written as [N, 1].

    Returns:
        The dataset folder, which `load` accepts as a path.
    """
    official = {n.lower(): n for n in OGB_NAMES}.get(name.lower())
    extra = _master(official) if official else {}
    split_name = extra["split"] if official else "random"
    folder = osp.join(root, name.replace("-", "_"))
    raw = osp.join(folder, "raw")
    split = osp.join(folder, "split", split_name)
    os.makedirs(raw, exist_ok=True)
    os.makedirs(split, exist_ok=True)
    _write_raw(data, raw, extra)
    for key, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        _write_csv(getattr(data, key).nonzero().numpy(), osp.join(split, f"{part}.csv.gz"))
    with open(osp.join(folder, META_FILE), "w") as f:
        json.dump(_meta_dict(data, name, split_name, extra), f, indent=1)
    with open(osp.join(folder, "RELEASE_v1.txt"), "w") as f:
        f.write(f"written by gnndist.datasets.write_ogb for {name}\n")
    return folder


def _write_raw(data: Data, raw: str, extra: dict[str, str]) -> None:
    """The ``raw/`` files of :func:`write_ogb` (``extra``: OGB's row of an official name, whose additional files
    are written as zeros)."""
    n = int(data.num_nodes)
    ei = data.edge_index.numpy()
    _write_csv(ei.T, osp.join(raw, "edge.csv.gz"))
    _write_csv(data.x.numpy(), osp.join(raw, "node-feat.csv.gz"), float_format="%.9g")
    edge_attr = getattr(data, "edge_attr", None)
    if edge_attr is not None:
        _write_csv(edge_attr.reshape(ei.shape[1], -1).numpy(), osp.join(raw, "edge-feat.csv.gz"), float_format="%.9g")
    _write_csv(data.y.numpy().reshape(n, -1), osp.join(raw, "node-label.csv.gz"))
    _write_csv(np.array([[n]]), osp.join(raw, "num-node-list.csv.gz"))
    _write_csv(np.array([[ei.shape[1]]]), osp.join(raw, "num-edge-list.csv.gz"))
    for kind, count in (("node", n), ("edge", ei.shape[1])):
        for file in str(extra.get(f"additional {kind} files", "None")).split(","):
            if file and file != "None":  # an official name reads these too: zeros stand in
                _write_csv(np.zeros((count, 1), dtype=np.int64), osp.join(raw, f"{file}.csv.gz"))


def _meta_dict(data: Data, name: str, split_name: str, extra: dict[str, str]) -> dict:
    """The ``meta_dict`` OGB needs to read :func:`write_ogb`'s folder under a name outside its master table."""
    y = data.y
    multilabel = y.dim() == 2 and y.shape[1] > 1
    return {
        "name": name,
        "num tasks": y.shape[1] if multilabel else 1,
        "num classes": int(data.num_classes),
        "eval metric": "rocauc" if multilabel else "acc",
        "task type": "binary classification" if multilabel else "multiclass classification",
        "download_name": name.replace("-", "_"),
        "version": 1,
        "url": "",
        "add_inverse_edge": "False",
        "has_node_attr": "True",
        "has_edge_attr": str(getattr(data, "edge_attr", None) is not None),
        "split": split_name,
        "additional node files": str(extra.get("additional node files", "None")),
        "additional edge files": str(extra.get("additional edge files", "None")),
        "is hetero": "False",
        "binary": "False",
    }


def ogb_files(master: Callable[[str], dict[str, str]], name: str) -> tuple[Remote, ...]:
    """OGB's zip of ``name``, from ``master(name)``, the installed ``ogb``'s row of its ``master.csv``: it unpacks
    as ``<root>/<name with underscores>``."""
    meta = master(name)
    return (Remote(meta["url"], name.replace("-", "_"), member=meta["download_name"]),)


for _name, (_licence, _metric) in OGBN.items():
    register(_name, load_ogb, files=functools.partial(ogb_files, _master, _name), licence=_licence,
             citation=OGB_CITATION, metric=_metric, typed=_name == "ogbn-mag")
register_format("ogb", read_ogb_folder, is_ogb_folder, typed=True)
