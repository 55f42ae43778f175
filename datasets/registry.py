"""Dataset registry: names -> loaders, path detection, and the one `load` entry point."""

from __future__ import annotations

import os
import os.path as osp
from collections.abc import Callable

from torch_geometric.data import Data

from gnndist.errors import UserError

from . import download, hetero, npy_folder, npz, ogb, ogbl, planetoid, pyg_file, snap, social
from . import sbm as synth
from .contract import validate
from .root import MissingFiles, default_root
from .schema import schema_of

Loader = Callable[[str, str, int], Data]  # (name, root, seed) -> Data

REGISTRY: dict[str, Loader] = {}
FORMATS: dict[
    str, Callable[[str, str, int], Data]
] = {}  # format -> (path, name, seed) -> Data
DETECTORS: list[tuple[str, Callable[[str], bool]]] = []  # (format, looks_like(path))


def register(name: str, loader: Loader) -> None:
    """Register ``loader`` under ``name`` (lower case)."""
    REGISTRY[name.lower()] = loader


def register_format(
    fmt: str,
    loader: Callable[[str, str, int], Data],
    detect: Callable[[str], bool] | None = None,
) -> None:
    """Register a file format loader and, optionally, a content sniffer for auto-detection."""
    FORMATS[fmt] = loader
    if detect is not None:
        DETECTORS.append((fmt, detect))


def names() -> list[str]:
    """Registered dataset names (plus the ``synthetic-<N>`` family, shown by examples)."""
    return sorted(REGISTRY) + ["synthetic-10k", "synthetic-1m", "synthetic-2m"]


def detect_format(path: str) -> str:
    """Name of the format of the file or folder at ``path``, from its contents."""
    for fmt, looks_like in DETECTORS:
        try:
            if looks_like(path):
                return fmt
        except OSError:
            continue
    raise UserError(
        f"{path}: format not recognised; pass --format, one of {', '.join(sorted(FORMATS))}"
    )


def resolve(path: str) -> tuple[str, str]:
    """``(format, path)`` of the graph at ``path``: the file or folder itself, else the one graph file in a folder.

    A folder that is no format of its own (a Shchur ``.npz``, a heterophily ``.npz`` or a
    ``.jlg`` in a folder of its name) stands for the one graph file directly inside it; an
    edge list loses to any other format there (an ids ``.csv`` beside a ``.jlg``). Several
    graph files: a one-line error naming them.
    """
    try:
        return detect_format(path), path
    except UserError:
        if not osp.isdir(path):
            raise
    found = []
    for name in sorted(os.listdir(path)):
        f = osp.join(path, name)
        if osp.isfile(f) and not name.lower().startswith(("readme", "license")):
            try:
                found.append((detect_format(f), f))
            except UserError:
                continue
    graphs = [(fmt, f) for fmt, f in found if fmt != "edgelist"] or found
    if len(graphs) == 1:
        return graphs[0]
    if graphs:
        raise UserError(f"{path} holds {len(graphs)} graphs: pass one of "
                        + ", ".join(osp.basename(f) for _, f in graphs))
    detect_format(path)  # raises: format not recognised
    raise AssertionError("unreachable")


def load(
    dataset: str, root: str | None = None, format: str | None = None, seed: int = 0, target: str | None = None
) -> Data:
    """Load a registered dataset, a ``synthetic-<N>`` graph, or a file/folder path.

    A registered dataset whose files are not under ``root`` is downloaded there first (:mod:`.download`: its public
    source, checked, unpacked atomically, one process per data root; ``GNNDIST_OFFLINE=1`` refuses in one line).
    A ``synthetic-*`` name is generated once into ``root/synthetic/`` (`sbm.named_folder`) and read
    as that ``.npy`` folder, like a path to it: memory-mapped, with its raw edge list
    (``data.raw_edges``), which the partitioner cleans.

    Args:
        dataset: a name from `names()`, ``synthetic-<N>[k|m][-d<avg degree>]``, or a path.
        root: where registered datasets live (default `default_root()`).
        format: force the format of a path (see ``FORMATS``); detected when None.
        seed: seed of random splits and synthetic graphs.
        target: the labelled node type of a heterogeneous graph (``--target``; default: the one type with
            labels); refused for a homogeneous graph.

    Shapes:
        x: [N, F] float32; y: [N] int64; edge_index: [2, E] int64, symmetric, no
        self-loops or duplicates, sorted by (row, col) (a ``.npy`` folder's: raw, int32 or
        int64); masks: [N] bool.
    """
    root = root or default_root()
    key = dataset.lower()
    if format is not None:
        if format not in FORMATS:
            raise UserError(
                f"unknown --format {format!r}; known: {', '.join(sorted(FORMATS))}"
            )
        if not osp.exists(dataset):
            raise UserError(f"{dataset}: no such file or folder")
        data = _read(format, dataset, _path_name(dataset), seed, target)
    elif key in HETERO_NAMES:
        data = _fetching(key, root, lambda: HETERO_NAMES[key](key, root, seed, target))
    elif key in REGISTRY:
        data = _fetching(key, root, lambda: REGISTRY[key](key, root, seed))
    elif hetero.parse_paper_word(key) is not None and hetero.parse_paper_word(key) in REGISTRY:
        data = hetero.load_paper_word(key, load(hetero.parse_paper_word(key), root, seed=seed), target)
    elif hetero.parse_synthetic_mag(key) is not None:
        data = hetero.load_synthetic_mag(key, seed, target)
    elif synth.parse_name(key) is not None:
        folder = synth.named_folder(key, root, seed)
        data = npy_folder.read_npy_folder(folder, key, seed)
        data.name = key
    elif osp.exists(dataset):
        fmt, path = resolve(dataset)
        data = _read(fmt, path, _path_name(dataset), seed, target)
    elif os.sep in dataset or dataset.startswith("."):
        raise UserError(f"{dataset}: no such file or folder")
    else:
        raise UserError(
            f"unknown dataset {dataset!r} (not a registered name nor an existing path); "
            f"known: {', '.join(names())}, synthetic-<N>[k|m]"
        )
    if target is not None and schema_of(data) is None:
        raise UserError(f"--target {target!r}: {dataset} is not a heterogeneous graph (it has one node type)")
    validate(data)
    return data


def _fetching(name: str, root: str, load_it: Callable[[], Data]) -> Data:
    """``load_it()``, the registered dataset ``name``; where its loader finds its files missing, they are downloaded
    into ``root`` (:func:`.download.fetch`) and it loads again."""
    try:
        return load_it()
    except MissingFiles as e:
        download.fetch(name, root, str(e))
    return load_it()


def _read(fmt: str, path: str, name: str, seed: int, target: str | None) -> Data:
    """The graph at ``path`` in format ``fmt``; a heterogeneous format also takes the ``target`` type."""
    if fmt in HETERO_FORMATS:
        return HETERO_FORMATS[fmt](path, name, seed, target)
    return FORMATS[fmt](path, name, seed)


def _path_name(path: str) -> str:
    """A readable dataset name from a path: the file stem or folder name."""
    base = osp.basename(osp.normpath(path))
    for ext in (".gz", ".npz", ".jlg", ".pt", ".mat", ".csv", ".txt", ".tsv", ".edges"):
        base = base.removesuffix(ext)
    return base or path


for _name in planetoid.PLANETOID:
    register(_name, lambda name, root, seed: planetoid.load_planetoid(name, root))
register_format(
    "planetoid",
    lambda path, name, seed: planetoid.load_planetoid_folder(path),
    lambda path: osp.isdir(path) and planetoid.detect_prefix(path) is not None,
)
for _name in npz.SHCHUR:
    register(_name, npz.load_shchur)
for _name in npz.GALLERY:
    register(_name, npz.load_gallery)
for _name in npz.HETEROPHILY:
    register(_name, npz.load_heterophily)
for _name in snap.SNAP:
    register(_name, snap.load_snap)
for _name in ogb.OGB_NAMES:
    register(_name, ogb.load_ogb)
for _name in ogbl.OGBL_NAMES:  # link prediction: data.link holds OGB's split
    register(_name, ogbl.load_ogbl)
HETERO_NAMES = {"ogbn-mag": ogb.load_ogb}  # (name, root, seed, target) -> Data with data.hetero
register_format("ogb", ogb.read_ogb_folder, ogb.is_ogb_folder)
register("facebook-page-page", social.load_musae)
register("fb100-cornell5", social.load_fb100)
register_format("musae", social.read_musae, social.is_musae)
register_format("fb100", social.read_fb100, social.is_fb100)
register_format("npy", npy_folder.read_npy_folder, npy_folder.is_npy_folder)
# (path, name, seed, target) -> Data (with data.hetero for a typed graph; an OGB folder may be ogbn-mag's)
HETERO_FORMATS = {"hetero": hetero.read_hetero_file, "ogb": ogb.read_ogb_folder}
register_format("hetero", hetero.read_hetero_file, hetero.is_hetero_file)  # before "pyg": both are torch.save zips
register_format("pyg", pyg_file.read_torch_file, pyg_file.is_torch_file)
register_format("npz", npz.read_shchur, npz.is_shchur)
register_format("heterophily", npz.read_heterophily, npz.is_heterophily)
register_format("jlg", snap.read_jlg, snap.is_jlg)
register_format("edgelist", snap.read_edge_list, snap.is_edge_list)
