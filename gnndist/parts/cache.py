"""The partition cache: where ``gnndist run`` keeps the partitions it makes, under a key of every setting.

    target = partition_dir("cora", part, data)     # $GNNDIST_PARTITIONS/cora-p4-auto-vol-s0...
    ensure_partition("cora", part, data, say=print)  # made once, reused by every later run of this gnndist
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from gnndist.config import DEFAULT_EDGE_SPLIT, DataConfig, ModelConfig, PartitionConfig, TaskConfig
from gnndist.datasets.spec import dataset_spec
from gnndist.errors import UserError
from gnndist.machine import data_root


def partition_cache() -> Path:
    """Folder of cached partitions: ``$GNNDIST_PARTITIONS``, else ``<data root>/partitions``.

    The data root is :func:`gnndist.machine.data_root` (``$GNNDIST_DATA``, else
    ``~/.cache/gnndist``), never ``--root``: a dataset folder given with ``--root`` is only read.
    """
    return Path(_user_cache() or Path(data_root()) / "partitions")


def _user_cache() -> str | None:
    """``$GNNDIST_PARTITIONS``, the user's folder of cached partitions, where it is set (read here alone)."""
    return os.environ.get("GNNDIST_PARTITIONS") or None


def partition_dir(dataset: str, part: PartitionConfig, data: DataConfig, model: ModelConfig | None = None,
                  task: TaskConfig | None = None) -> Path:
    """Cache directory of a partition: :func:`partition_cache` / key.

    The key names the dataset, split, parts, method, objective, seed and every non-default
    setting (balance, refinement, network, auto budget, modelled model ``-h<hidden>x<layers>``, the second message
    graph of ``task``'s ``--use-valedges-as-input``, ``-valedges``). When the data
    may not be the one the cache's own data root holds (a path, a ``--root`` other than the data
    root, or a ``$GNNDIST_PARTITIONS`` cache), the name is followed by a short hash of where the
    data comes from, so that two datasets of one name never share a partition.
    """
    is_path = os.sep in dataset or os.path.exists(dataset)
    name = Path(dataset).name if is_path else dataset
    root = os.path.realpath(data.root or data_root())
    sources = [os.path.realpath(dataset)] if is_path else []
    if root != os.path.realpath(data_root()) or _user_cache():
        sources.append(root)
    if sources:
        name += "-" + hashlib.sha256("\n".join(sources).encode()).hexdigest()[:8]
    obj = part.objective if part.method != "random" else "none"
    key = f"{name}-p{part.parts}-{part.method}-{obj}-s{part.partition_seed}"
    if data.split_seed:
        key += f"-split{data.split_seed}"
    if data.random_splits:
        key += f"-rsplits{data.random_splits}"
    if data.target:
        key += f"-target-{data.target}"
    if data.edge_split:
        key += "-edges" + "+".join(data.edge_split.split(","))
    if part.method != "random" and part.balance != "auto":
        key += "-b" + "+".join(part.constraints)
    if part.method != "random" and not part.refine:
        key += "-norefine"
    if part.partition_network == "probe":  # the constants decide the partition: a re-probe is another key
        net = probed_network(part.parts)
        key += "-probe" + hashlib.sha256(repr(sorted(net.as_dict().items())).encode()).hexdigest()[:8]
    elif part.partition_network != "ib":
        key += f"-{part.partition_network}"
    if part.auto_budget != PartitionConfig.auto_budget and (part.method == "auto" or part.balance == "auto"):
        key += f"-budget{part.auto_budget:g}"
    model, default = model or ModelConfig(), ModelConfig()
    if (model.hidden, model.layers) != (default.hidden, default.layers):
        key += f"-h{model.hidden}x{model.layers}"
    if task is not None and task.use_valedges_as_input:  # the partition holds a second message graph
        key += "-valedges"
    return partition_cache() / key


def link_data(dcfg: DataConfig, cfg, dataset: str) -> DataConfig:
    """``dcfg``, with GAE's edge split (:data:`DEFAULT_EDGE_SPLIT`) when ``cfg`` is a link task on a graph that
    ships none (a link dataset's spec says it has its own) and no ``--edge-split`` was given: what ``run``
    partitions and ``predict`` finds cached."""
    spec = dataset_spec(dataset)
    if cfg.task.task == "link" and dcfg.edge_split is None and (spec is None or spec.task != "link"):
        dcfg = dataclasses.replace(dcfg, edge_split=DEFAULT_EDGE_SPLIT)
    return dcfg


def probed_network(parts: int):
    """``--partition-network probe``: the constants the probe cached for this machine alone at ``parts`` ranks (on the
    device a run takes: CUDA when there is one); a one-line :class:`UserError` when it holds none."""
    import torch

    from gnndist.dist.probe import default_cache, machine_key, read_cached

    key = machine_key(parts, "cuda" if torch.cuda.is_available() else "cpu")
    net = read_cached(default_cache(), key)
    if net is None:
        raise UserError(f"--partition-network probe: {default_cache()} holds no constants for {key}; a run with "
                        f"--strategy auto on {parts} ranks measures and stores them (or choose nvlink, ib or ethernet)")
    return net


def check_edge_split(dataset: str, dcfg: DataConfig) -> None:
    """One line for ``--edge-split`` on a dataset with a link split of its own."""
    spec = dataset_spec(dataset)
    if dcfg.edge_split and spec is not None and spec.task == "link":
        raise UserError(f"--edge-split: {dataset} has an edge split of its own (its link-prediction split)")


def load_data(dataset: str, dcfg: DataConfig, say=lambda line: None):
    """``dataset`` as ``dcfg`` asks: loaded, with ``--random-splits`` and ``--edge-split`` (its message graph then
    the training edges'); ``say`` hears each stage."""
    from gnndist.datasets import load

    say(f"loading {dataset}")
    data = load(dataset, root=dcfg.root, format=dcfg.format, seed=dcfg.split_seed, target=dcfg.target)
    if dcfg.random_splits:
        from gnndist.datasets.split import add_random_splits

        add_random_splits(data, dcfg.split_seed, dcfg.random_splits)
    if dcfg.edge_split:
        from gnndist.datasets.edge_split import parse_edge_split, random_edge_split, set_edge_split

        say(f"splitting the edges {dcfg.edge_split} (seed {dcfg.split_seed})")
        set_edge_split(data, *random_edge_split(data.edge_index, int(data.num_nodes),
                                                parse_edge_split(dcfg.edge_split), dcfg.split_seed))
    return data


def make_partition(dataset: str, part: PartitionConfig, dcfg: DataConfig, out: str | None,
                   model: ModelConfig | None = None, say=lambda msg: None, task: TaskConfig | None = None
                   ) -> tuple[Path, dict]:
    """Load ``dataset``, partition it for the model of ``part`` and save it to ``out`` (default: the cache).

    Returns the directory and the report; ``say`` hears each stage. The cost model times a model
    of widths ``(F, model.hidden, ..., classes)`` with ``model.layers`` layers (default: ModelConfig()'s).
    ``task``'s ``--use-valedges-as-input`` also stores the message graph of training + validation edges (a link
    split with validation edges, or one line).
    """
    from gnndist.partition import model_widths_of, partition
    from gnndist.partition.link import check_valedges

    model = model or ModelConfig()
    valedges = task is not None and task.use_valedges_as_input
    check_edge_split(dataset, dcfg)  # before loading it: one line at once
    target = Path(out) if out else partition_dir(dataset, part, dcfg, model, task)
    _check_writable(target, cached=not out)
    data = load_data(dataset, dcfg, say)
    if valedges:  # before partitioning: a graph that cannot have it is one line at once
        check_valedges(data, dataset)
    say(f"partitioning {int(data.num_nodes):,} nodes into {part.parts} parts ({part.method})")
    widths = model_widths_of(data, model.hidden, model.layers)
    p = partition(data, part.parts, part.method, part.objective, part.partition_seed, part.constraints,
                  refine=part.refine, widths=widths, auto_budget=part.auto_budget, threads=part.threads,
                  cost_network=(probed_network(part.parts) if part.partition_network == "probe"
                                else part.partition_network))
    say(f"writing the parts to {target}")
    name = getattr(data, "name", None) or Path(dataset).name
    return p.save(target, dataset=name, valedges=valedges), p.report


def _check_writable(target: Path, cached: bool) -> None:
    """Refuse at once, before loading and partitioning, a ``target`` whose nearest existing path is a file (in the
    way of its folders) or a read-only folder."""
    folder = target
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder != target and not folder.is_dir():
        raise UserError(f"cannot write the partition to {target}: {folder} is a file in the way of its directory")
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        hint = "; set $GNNDIST_PARTITIONS to a writable folder for the cache" if cached else ""
        raise UserError(f"cannot write the partition to {target}: {folder} is read-only{hint}")


def is_ready(target: Path, parts: int) -> bool:
    """Whether ``target`` holds a complete partition into ``parts`` parts (META.json is written last) that this
    gnndist would write: its partition format and algorithm versions are this gnndist's."""
    from gnndist.partition.format import read_meta, version_mismatch

    try:
        return ((target / "META.json").is_file() and version_mismatch(target) is None
                and read_meta(target)["parts"] == parts)
    except UserError:
        return False


def ensure_partition(dataset: str, part: PartitionConfig, dcfg: DataConfig, model: ModelConfig | None = None,
                     say=lambda msg: None, task: TaskConfig | None = None) -> Path:
    """The cached partition of ``dataset`` for ``part``, ``dcfg``, ``model`` and ``task`` (``--use-valedges-as-input``),
    made now if the cache has none, or remade (``say`` hears why) if an older (or newer) gnndist made it: a partition
    is never reused across partition format or algorithm versions (:data:`gnndist.partition.format.ALGORITHM_VERSION`).
    """
    from gnndist.partition.format import version_mismatch

    target = partition_dir(dataset, part, dcfg, model, task)
    if is_ready(target, part.parts):
        say(f"using the cached partition {target}")
        return target
    why = version_mismatch(target)
    if why is not None:
        say(f"rebuilding {target}: {why}")
    return make_partition(dataset, part, dcfg, None, model, say=say, task=task)[0]
