"""A registered dataset is a spec: its loader, its source files, its task, metric and recipe (the shape of
:mod:`gnndist.nn.models.spec`; PyG's dataset classes keep ``url``, files, ``download`` and ``process`` together).

Whatever needs to know what a dataset is reads its spec: :func:`gnndist.datasets.load` (its loader, typed or not),
the downloader (:func:`source`: its files with their sha256, its licence and citation), the task a run on it learns
(:func:`gnndist.presets.task_of`, :func:`gnndist.tasks.task_name`), its default metric
(:func:`gnndist.tasks.metrics.default_metric`), its family's recipe (a name in :data:`gnndist.presets.RECIPES`)
and the CLI's help. Nothing keeps a set of dataset names or tests a name's prefix. :func:`register` is the one way
in, called beside each loader (``planetoid.py``, ``npz.py``, ...); :func:`register_format` does the same for a file
format that paths are read in.

    spec = dataset_spec("../data/minesweeper/minesweeper.npz")   # a path's name part: minesweeper's spec
    spec.task, spec.metric, spec.recipes                        # "node", "rocauc", {"node": "heterophily"}
    dataset_spec("my_graph.npz")                                # None: a user's file keeps the defaults

The built-in datasets are registered before any lookup: the package (``gnndist/datasets/__init__.py``) imports the
loader modules, as :mod:`gnndist.nn.models` imports the models. Those import their heavy libraries
(``torch_geometric``, ``pandas``, ``scipy``) where they read a file, so a rank that asks for its dataset's metric
stays light.
"""

from __future__ import annotations

import os.path as osp
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_geometric.data import Data

FILE_SUFFIXES = (".gz", ".npz", ".jlg", ".pt", ".mat", ".csv", ".txt", ".tsv", ".edges")  # a path's name: its stem


@dataclass(frozen=True)
class Remote:
    """One published file and where it goes under the data root.

    Args:
        url: where the file is published.
        path: under the data root, ``/``-separated: the file itself; for a zip (``member`` set), the folder it
            unpacks into.
        sha256: the file's hash where known (checked), else None.
        size: the file's bytes where known (checked), else None: the server's Content-Length is checked.
        member: a zip's top folder that becomes ``path`` (OGB's ``download_name``); None: a plain file.
    """

    url: str
    path: str
    sha256: str | None = None
    size: int | None = None
    member: str | None = None


@dataclass(frozen=True)
class Source:
    """A registered dataset's public source: its files, their licence and what to cite."""

    files: tuple[Remote, ...]
    licence: str
    citation: str

    @property
    def folder(self) -> str:
        """The dataset's folder directly under the data root (its lock file sits beside it)."""
        return self.files[0].path.split("/")[0]


# loader(name, root, seed) -> Data; a typed dataset's also takes target= (the labelled node type, --target)
Loader = Callable[..., "Data"]
# reader(path, name, seed) -> Data; a typed format's also takes target=
Reader = Callable[..., "Data"]


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset, or a family of them: how to load it and what a run on it is.

    Args:
        name: the registered name, lower case (``gnndist run NAME``); a family's is how its names read
            (``synthetic-<N>``).
        loader: ``(name, root, seed) -> Data`` (typed: also ``target=``); None: the name is only known, its files
            are read as a path (its task, metric and recipe still apply).
        pattern: a family's names, a regular expression the whole name matches (default ``None``: ``name`` only).
        aliases: other names its files go by (their stems), which a path's name part matches too.
        files: its public source files (URL, path under the data root, sha256 and size where known), or a function
            that reads them where they are published elsewhere (OGB's ``master.csv``); empty: nothing to download.
        licence, citation: of the source, printed once when it arrives.
        task: the task it is for, a name in :data:`gnndist.tasks.TASKS`: ``"node"`` (labels of nodes, the default)
            or ``"link"`` (its own edge split; a node task is refused on it).
        metric: its standard metric where that is not accuracy (``"rocauc"``; a link dataset's ``"hits@50"`` or
            ``"mrr"``, as its split says); None: ``acc``, or ROC-AUC for multi-label labels.
        recipes: the run's task -> the name of its family's recipe in :data:`gnndist.presets.RECIPES`.
        typed: a heterogeneous graph (typed nodes and relations): its loader takes ``target=`` (``--target``).
        featureless: its nodes have no features of their own (a link task learns every node's input row).
        examples: names of a family to list beside the registered names (:func:`names`).
    """

    name: str
    loader: Loader | None = None
    pattern: str | None = None
    aliases: tuple[str, ...] = ()
    files: tuple[Remote, ...] | Callable[[], tuple[Remote, ...]] = ()
    licence: str = ""
    citation: str = ""
    task: str = "node"
    metric: str | None = None
    recipes: dict[str, str] = field(default_factory=dict)
    typed: bool = False
    featureless: bool = False
    examples: tuple[str, ...] = ()

    def named(self, key: str) -> bool:
        """Whether ``key`` (lower case) is this dataset's name, or one of its family's."""
        if self.pattern is None:
            return key == self.name
        return re.fullmatch(self.pattern, key) is not None

    def source(self) -> Source | None:
        """Its public source, or None where it has none."""
        files = self.files() if callable(self.files) else self.files
        return Source(tuple(files), self.licence, self.citation) if files else None

    def load(self, name: str, root: str, seed: int, target: str | None) -> Data:
        """The graph ``name`` (this dataset, or a member of its family) from ``root``; only a typed one takes
        ``target``."""
        if self.typed:
            return self.loader(name, root, seed, target=target)
        return self.loader(name, root, seed)


@dataclass(frozen=True)
class Format:
    """A file format that paths are read in (``--format NAME``, else detected from the contents).

    Args:
        name: ``--format``'s value.
        reader: ``(path, name, seed) -> Data`` (typed: also ``target=``).
        detect: ``path -> bool``, whether the file or folder is in this format (None: only by ``--format``).
        typed: it may hold a heterogeneous graph: its reader takes ``target=``.
        fallback: 0, a specific format; 1, a general one (any ``torch.save`` file), tried after the specific
            ones; 2, the last resort (a text edge list), which also loses to any other graph file in a folder.
    """

    name: str
    reader: Reader
    detect: Callable[[str], bool] | None = None
    typed: bool = False
    fallback: int = 0

    def read(self, path: str, name: str, seed: int, target: str | None) -> Data:
        """The graph at ``path``; only a typed format takes ``target``."""
        return self.reader(path, name, seed, target=target) if self.typed else self.reader(path, name, seed)


DATASETS: dict[str, DatasetSpec] = {}  # registered name (a family's: its name) -> its spec, in registration order
FORMATS: dict[str, Format] = {}  # --format name -> the format


def register(name: str, loader: Loader | None = None, **declared) -> DatasetSpec:
    """Register the dataset (or family) ``name`` loaded by ``loader``; ``declared``: the other fields of
    :class:`DatasetSpec` (``pattern``, ``files``, ``licence``, ``citation``, ``task``, ``metric``, ``recipes``,
    ``typed``, ...); a family's ``name`` is kept as written (``synthetic-<N>``), a dataset's is lower case. Returns
    the spec, which :data:`DATASETS` now holds."""
    spec = DatasetSpec(name if declared.get("pattern") else name.lower(), loader, **declared)
    DATASETS[spec.name] = spec
    return spec


def register_format(name: str, reader: Reader, detect: Callable[[str], bool] | None = None, typed: bool = False,
                    fallback: int = 0) -> Format:
    """Register the file format ``name`` (see :class:`Format`); returns it."""
    fmt = Format(name, reader, detect, typed, fallback)
    FORMATS[name] = fmt
    return fmt


def name_part(name_or_path: str) -> str:
    """What a name or path is matched by: the last path component, lower case, without a file suffix
    (:data:`FILE_SUFFIXES`; an OGB folder's ``_pyg``), ``_`` read as ``-`` (``../data/roman_empire.npz`` ->
    ``roman-empire``)."""
    base = osp.basename(osp.normpath(name_or_path)).lower()
    for suffix in (*FILE_SUFFIXES, "_pyg"):
        base = base.removesuffix(suffix)
    return base.replace("_", "-")


def dataset_spec(name_or_path: str | None) -> DatasetSpec | None:
    """The spec of a registered name, a family member or a path's name part (:func:`name_part`), else None (a
    user's file: its task is ``node``, its metric accuracy, no recipe)."""
    if not name_or_path:
        return None
    key = name_part(name_or_path)
    return next((s for s in DATASETS.values() if s.named(key)), None) or next(
        (s for s in DATASETS.values() if key in s.aliases), None)


def loading_spec(name: str) -> DatasetSpec | None:
    """The spec whose loader reads the bare name ``name`` (lower case, as typed: not a path), else None."""
    return next((s for s in DATASETS.values() if s.loader is not None and s.named(name)), None)


def formats() -> dict[str, Format]:
    """Every registered format by name, in the order they are detected (the specific ones first)."""
    return {f.name: f for f in sorted(FORMATS.values(), key=lambda f: f.fallback)}


def names() -> list[str]:
    """Registered dataset names that load by name, and the examples of a family (``synthetic-10k``, ...)."""
    loaded = [s for s in DATASETS.values() if s.loader is not None]
    return sorted(s.name for s in loaded if s.pattern is None) + [e for s in loaded for e in s.examples]


def source(name: str) -> Source | None:
    """The public source of the registered dataset ``name``, or None where it has none."""
    spec = loading_spec(name.lower())
    return spec.source() if spec is not None else None


def declared_metrics() -> str:
    """The registered datasets whose spec declares a metric other than accuracy, by metric, for ``--metric``'s help
    (``hits@50: ogbl-collab; ...; rocauc: minesweeper, ogbn-proteins, ...``)."""
    own: dict[str, list[str]] = {}
    for s in DATASETS.values():
        if s.metric not in (None, "acc"):
            own.setdefault(s.metric, []).append(s.name)
    return "; ".join(f"{m}: {', '.join(sorted(ns))}" for m, ns in sorted(own.items()))


def link_datasets() -> list[str]:
    """The registered datasets that hold their own edge split (their task is ``link``), for ``--task``'s help."""
    return sorted(s.name for s in DATASETS.values() if s.task == "link")
