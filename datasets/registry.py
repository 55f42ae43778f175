"""The one `load` entry point: a registered name through its spec's loader, a path through its format.

The names and formats are registered beside their loaders (:mod:`.spec`); this module only dispatches.
"""

from __future__ import annotations

import os
import os.path as osp
from collections.abc import Callable
from typing import TYPE_CHECKING

from gnndist.errors import UserError

from . import download
from .contract import validate
from .root import MissingFiles, default_root
from .schema import schema_of
from .spec import FILE_SUFFIXES, Source, formats, loading_spec, names

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = ["detect_format", "load", "names", "resolve"]


def detect_format(path: str) -> str:
    """Name of the format of the file or folder at ``path``, from its contents."""
    known = formats()
    for fmt in known.values():
        try:
            if fmt.detect is not None and fmt.detect(path):
                return fmt.name
        except OSError:
            continue
    raise UserError(f"{path}: format not recognised; pass --format, one of {', '.join(sorted(known))}")


def resolve(path: str) -> tuple[str, str]:
    """``(format, path)`` of the graph at ``path``: the file or folder itself, else the one graph file in a folder.

    A folder that is no format of its own (a Shchur ``.npz``, a heterophily ``.npz`` or a
    ``.jlg`` in a folder of its name) stands for the one graph file directly inside it; an
    edge list (the last-resort format) loses to any other format there (an ids ``.csv`` beside a ``.jlg``). Several
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
    last = formats()
    graphs = [(fmt, f) for fmt, f in found if last[fmt].fallback < 2] or found
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
    spec = loading_spec(key) if format is None else None
    if format is not None:
        if format not in formats():
            raise UserError(f"unknown --format {format!r}; known: {', '.join(sorted(formats()))}")
        if not osp.exists(dataset):
            raise UserError(f"{dataset}: no such file or folder")
        data = _read(format, dataset, _path_name(dataset), seed, target)
    elif spec is not None:
        data = _fetching(key, root, spec.source, lambda: spec.load(key, root, seed, target))
        if spec.featureless:  # declared by the spec: a link task learns every node's input row
            data.featureless = True
    elif osp.exists(dataset):
        fmt, path = resolve(dataset)
        data = _read(fmt, path, _path_name(dataset), seed, target)
    elif os.sep in dataset or dataset.startswith("."):
        raise UserError(f"{dataset}: no such file or folder")
    else:
        raise UserError(f"unknown dataset {dataset!r} (not a registered name nor an existing path); "
                        f"known: {', '.join(names())}, synthetic-<N>[k|m]")
    if target is not None and schema_of(data) is None:
        raise UserError(f"--target {target!r}: {dataset} is not a heterogeneous graph (it has one node type)")
    validate(data)
    return data


def _fetching(name: str, root: str, source: Callable[[], Source | None], load_it: Callable[[], Data]) -> Data:
    """``load_it()``, the registered dataset ``name``; where its loader finds its files missing, they are downloaded
    from ``source()`` into ``root`` (:func:`.download.fetch`) and it loads again."""
    try:
        return load_it()
    except MissingFiles as e:
        download.fetch(name, root, str(e), source())
    return load_it()


def _read(fmt: str, path: str, name: str, seed: int, target: str | None) -> Data:
    """The graph at ``path`` in format ``fmt`` (a typed format also takes the ``target`` type)."""
    return formats()[fmt].read(path, name, seed, target)


def _path_name(path: str) -> str:
    """A readable dataset name from a path: the file stem or folder name."""
    base = osp.basename(osp.normpath(path))
    for ext in FILE_SUFFIXES:
        base = base.removesuffix(ext)
    return base or path
