"""What a part holds, as declared components: each one's writer, reader, disk bytes, memory term and META.json keys.

A part is the union of its components' arrays. :data:`COMPONENTS` lists them in the order a part's files are
written; the partition writer (:meth:`~gnndist.partition.pipeline.Partition.part_arrays`), its space estimate
(``disk_bytes``), a rank's reader (:class:`~gnndist.graph.DistGraph`) and the memory model
(:mod:`gnndist.parts.simulate`) iterate over it and probe nothing:

    structure        rowptr, col, halo_gid, recv/send plans, orig_id, degree   (every part)
    features         x                               [n_owned, F]   META F (featureless)
    labels           y                               [n_owned] or [n_owned, T]   META classes, multilabel
    exchanges        layout_pairs                    every layout's rows received, from each rank
    masks            train/val/test_mask [n_owned]; train/val/test_masks [n_owned, K]   META num_train, splits
    edge features    edge_attr                       [nnz_local, *]  (a graph with edge features)
    edge weights     edge_weight, weighted_degree    [nnz_local], [n_owned + n_halo]  (ogbl-collab)  META edge_weights
    relations        rel_rowptr, rel_col             (a typed graph, :mod:`~gnndist.partition.hetero`)  META hetero
    link split       link_<pairs>, link_home         (an edge split, :mod:`~gnndist.partition.link`)  META link

A task declares the components it stores (:attr:`gnndist.tasks.base.Task.parts`); registering a task registers
them here (:func:`register_component`), after the built-in ones. The sub-partitions a partition may hold beside
its parts (``DIR/<name>/``) are declared the same way, in :mod:`~gnndist.partition.subparts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gnndist.datasets.schema import HeteroSchema
from gnndist.partition.book import LocalPart, edge_values_in_csr
from gnndist.partition.hetero import RelationSlicer
from gnndist.partition.layouts import LayoutCounts
from gnndist.partition.link import (
    LINK_PREFIX,
    link_arrays,
    link_bytes,
    link_of,
)
from torch import Tensor

from gnndist.errors import UserError
from gnndist.files import drop_pages
from gnndist.machine import CHUNK

if TYPE_CHECKING:
    from gnndist.partition.pipeline import Partition

Arrays = dict[str, np.ndarray]
MASKS = ("train_mask", "val_mask", "test_mask")  # [n_owned] bool each: the dataset's split (all False without one)
SPLIT_ARRAYS = ("train_masks", "val_masks", "test_masks")  # a partition's stored splits, [n_owned, K] bool each


def field(data, name: str):
    """``data.name``, or None where the graph has no such field (what a component reads of a loaded graph)."""
    return getattr(data, name, None)


@dataclass(frozen=True)
class RankRows:
    """What one training rank holds, counted: the memory terms' inputs."""

    rows: int  # owned rows
    halo: int = 0  # rows received per SpMM
    send: int = 0  # rows sent per SpMM
    nnz: int = 0  # entries of its rows of A
    features: int = 0  # the input width F


class Component:
    """One kind of content of a part: its arrays, META.json keys, disk bytes, memory term and reader.

    Attributes:
        name: the component's name (unique in :data:`COMPONENTS`).
        meta_key: the META.json key whose presence says a partition holds it (None: no key of its own).
    """

    name: str = ""
    meta_key: str | None = None

    def held(self, part: Partition) -> bool:
        """Whether the partitioned graph (``part.data``) has this content (every part then stores it)."""
        return True

    def meta(self, part: Partition) -> dict:
        """What META.json records of it (written where :meth:`held`)."""
        return {}

    def writer(self, part: Partition, counts: LayoutCounts) -> Callable[[LocalPart], Arrays]:
        """Each part's arrays of it: prepared once for the partition, then called once per part in rank order."""
        raise NotImplementedError

    def disk_bytes(self, part: Partition) -> int:
        """What its arrays take on disk, every part together (from the shapes; .npy headers aside)."""
        return 0

    def memory(self, rank: RankRows) -> int:
        """Resident bytes of it on a training rank (:func:`gnndist.parts.memory.training_peak`)."""
        return 0

    def read(self, t: dict[str, Tensor], meta: dict, n_owned: int, n_halo: int) -> dict[str, Any]:
        """The :class:`~gnndist.graph.DistGraph` fields it gives, from a part's arrays as tensors ``t``: their
        defaults where the partition does not hold it (a built-in's, which every graph has), or none."""
        return {}


def gathered(t: Tensor, rows: np.ndarray, mapped=(), values: int = CHUNK) -> np.ndarray:
    """``t[rows]`` as numpy; with memory-mapped inputs (``mapped``), gathered ~``values`` values at a time,
    letting their pages go after each (``rows`` ascending: each gather reads one stretch of the file), so a
    part's rows never hold the whole file's pages (256 MiB of features at 1M nodes x 64).

    Shapes:
        t ``[N, *]``, rows ``[n]`` -> ``[n, *]``
    """
    if not mapped:
        return t[rows].numpy()
    src = t.numpy()
    out = np.empty((len(rows), *src.shape[1:]), dtype=src.dtype)
    step = max(values // max(int(np.prod(src.shape[1:])), 1), 1)
    for s in range(0, len(rows), step):
        np.take(src, rows[s : s + step], axis=0, out=out[s : s + step])
        for mm in mapped:
            drop_pages(mm)
    return out


def _row_bytes(t: Tensor | None) -> int:
    """Bytes of one row of ``t`` (0 for None)."""
    return t[:1].numel() * t.element_size() if t is not None else 0


class Structure(Component):
    """The part's rows of ``A`` and its 1D halo: ``rowptr``, ``col``, the halo ids and plans, dataset ids, degrees."""

    name = "structure"

    def writer(self, part, counts):
        return LocalPart.arrays

    def disk_bytes(self, part):
        n, nnz = int(part.csr.num_nodes), int(part.csr.nnz)
        return n * (8 + 8 + 4) + nnz * part.csr.col.dtype.itemsize  # orig_id, degree, rowptr (int32); col

    def memory(self, rank):
        # per node: dataset ids, degrees, GCN scaling (8 B each, owned and halo); GCN's D^-1/2 of the owned rows
        # (4 B); halo ids and the send plan (8 B each)
        return 24 * (rank.rows + rank.halo) + 4 * rank.rows + 8 * (rank.halo + rank.send)

    def read(self, t, meta, n_owned, n_halo):
        # orig_id [n_owned + n_halo] dataset ids; degree [n_owned + n_halo] global, no self-loops
        return {"orig_id": t["orig_id"], "degree": t["degree"]}


class Features(Component):
    """The owned rows' input features ``x`` ``[n_owned, F]`` (F = 0 on a featureless graph)."""

    name = "features"

    def meta(self, part):
        data = part.data
        out = {"F": int(data.x.shape[1])}
        if "featureless" in data and data.featureless:  # none of its own (ogbl-ddi, SNAP): a link task learns rows
            out["featureless"] = True
        return out

    def writer(self, part, counts):
        d = part.data
        mapped = getattr(d, "memmaps", ())
        return lambda lp: {"x": gathered(d.x, lp.orig_id[: lp.n_owned], mapped)}

    def disk_bytes(self, part):
        return int(part.csr.num_nodes) * _row_bytes(part.data.x)

    def memory(self, rank):
        return 4 * rank.features * rank.rows  # float32, the part's mapped rows

    def read(self, t, meta, n_owned, n_halo):
        return {"x": t["x"]}  # [n_owned, F]


class Labels(Component):
    """The owned rows' labels ``y``: ``[n_owned]`` class ids, or ``[n_owned, T]`` binary tasks."""

    name = "labels"

    def meta(self, part):
        data, y = part.data, part.data.y
        return {"classes": int(field(data, "num_classes") or (int(y.max()) + 1 if y.numel() else 0)),
                "multilabel": bool(y.dim() > 1)}

    def writer(self, part, counts):
        d = part.data
        mapped = getattr(d, "memmaps", ())
        return lambda lp: {"y": gathered(d.y, lp.orig_id[: lp.n_owned], mapped)}

    def disk_bytes(self, part):
        return int(part.csr.num_nodes) * _row_bytes(part.data.y)

    def memory(self, rank):
        return 8 * rank.rows  # int64 class ids

    def read(self, t, meta, n_owned, n_halo):
        return {"y": t["y"], "num_classes": int(meta["classes"])}


class Exchanges(Component):
    """Every SpMM layout's rows this part receives from each rank (``layout_pairs``; ``auto`` reads them)."""

    name = "exchanges"

    def writer(self, part, counts):
        return lambda lp: {"layout_pairs": counts.part_pairs(lp.rank)}


class Masks(Component):
    """The dataset's split of the owned rows (``train_mask`` ...) and every split it holds (``train_masks`` ...)."""

    name = "masks"

    def meta(self, part):
        train, splits = field(part.data, "train_mask"), field(part.data, "train_masks")
        return {"num_train": int(train.sum()) if train is not None else 0,
                "splits": int(splits.shape[1]) if splits is not None else 0,
                "split_kind": field(part.data, "split_kind")}

    def writer(self, part, counts):
        d = part.data
        masks = {m: field(d, m) for m in MASKS}
        splits = {m: field(d, m) for m in SPLIT_ARRAYS if field(d, m) is not None}

        def write(lp: LocalPart) -> Arrays:
            owned = lp.orig_id[: lp.n_owned]
            out = {m: (v[owned] if v is not None else torch.zeros(len(owned), dtype=torch.bool)).numpy()
                   for m, v in masks.items()}
            return out | {m: v[owned].numpy() for m, v in splits.items()}  # [n_owned, K] each

        return write

    def disk_bytes(self, part):
        splits = field(part.data, "train_masks")
        return int(part.csr.num_nodes) * (3 + (3 * splits.shape[1] if splits is not None else 0))

    def memory(self, rank):
        return 3 * rank.rows  # a bool per row and mask

    def read(self, t, meta, n_owned, n_halo):
        return {"train_mask": t["train_mask"], "val_mask": t["val_mask"], "test_mask": t["test_mask"],
                "num_train": int(meta.get("num_train", 0)),
                "splits": {k: t[k] for k in SPLIT_ARRAYS if k in t}}  # [n_owned, K] each


class EdgeFeatures(Component):
    """The features of the part's edges, ``edge_attr`` ``[nnz_local, *]``: one row per local edge, in the local
    CSR's order (the dataset's edges on the symmetric CSR: :func:`~gnndist.partition.book.edge_values_in_csr`)."""

    name = "edge features"

    def held(self, part):
        return field(part.data, "edge_attr") is not None

    def writer(self, part, counts):
        d = part.data
        index = field(d, "edge_attr_index")  # the edge list edge_attr is aligned with (default: edge_index)
        ea = edge_values_in_csr(part.csr, part.book, d.edge_index if index is None else index, d.edge_attr.numpy())
        rowptr, offsets = part.csr.rowptr, part.book.offsets  # [nnz, *] in CSR order: each part takes its rows'

        return lambda lp: {"edge_attr": ea[rowptr[offsets[lp.rank]] : rowptr[offsets[lp.rank + 1]]]}

    def disk_bytes(self, part):
        return int(part.csr.nnz) * _row_bytes(part.data.edge_attr)

    def memory(self, rank):
        return 0  # not modelled: the training peak's model graphs have no edge features

    def read(self, t, meta, n_owned, n_halo):
        return {"edge_attr": t.get("edge_attr")}  # [nnz, *] in CSR order, or None


class EdgeWeights(Component):
    """The weights of the part's edges (ogbl-collab's: ``data.edge_weight``), ``edge_weight`` ``[nnz_local]`` float32
    in the local CSR's order, and the weighted degree of its owned and halo rows, ``weighted_degree``
    ``[n_owned + n_halo]`` float64 (each node's sum over its whole row, summed once for the partition: the same at
    any P), which ``--edge-weights`` reads (GCN's normalisation of ``A_w + I``). META.json: ``edge_weights``."""

    name = "edge weights"
    meta_key = "edge_weights"

    def held(self, part):
        return field(part.data, "edge_weight") is not None

    def meta(self, part):
        return {"edge_weights": True}

    def writer(self, part, counts):
        csr, offsets = part.csr, part.book.offsets
        w = edge_values_in_csr(csr, part.book, part.data.edge_index, part.data.edge_weight.numpy())  # [nnz]
        degree = np.bincount(csr.rows(), weights=w.astype(np.float64), minlength=csr.num_nodes)  # [N] float64

        def write(lp):
            own = slice(offsets[lp.rank], offsets[lp.rank + 1])
            return {"edge_weight": w[csr.rowptr[own.start] : csr.rowptr[own.stop]].astype(np.float32),
                    "weighted_degree": np.concatenate([degree[own], degree[lp.halo_gid]])}

        return write

    def disk_bytes(self, part):
        return int(part.csr.nnz) * 4 + int(part.csr.num_nodes) * 8  # halo rows' degrees aside

    def memory(self, rank):
        return 4 * rank.nnz + 8 * (rank.rows + rank.halo)

    def read(self, t, meta, n_owned, n_halo):
        return {"edge_weight": t.get("edge_weight"), "weighted_degree": t.get("weighted_degree")}  # or None


def choose_edge_weights(fields: dict[str, Any], meta: dict, wanted: bool) -> None:
    """Keep a part's edge weights in a rank's ``fields`` where ``--edge-weights`` asks for them (one line where the
    partition holds none), else leave them out: the graph is then aggregated as unweighted."""
    if not wanted:
        fields["edge_weight"] = fields["weighted_degree"] = None
    elif fields["edge_weight"] is None:
        raise UserError(f"--edge-weights: the partition of {meta.get('dataset')} holds no edge weights (ogbl-collab's "
                        f"do, except one made before 2026-12-07: partition it again); or leave the flag out "
                        f"(--no-edge-weights where the recipe sets it)")


class Relations(Component):
    """A typed graph's rows of each relation, ``rel_rowptr`` ``[R, n_owned + 1]`` and ``rel_col``
    (:mod:`~gnndist.partition.hetero`), and its types (META.json's ``hetero``)."""

    name = "relations"
    meta_key = "hetero"

    def held(self, part):
        return part.schema is not None

    def meta(self, part):
        return {"hetero": part.schema.to_meta()}

    def writer(self, part, counts):
        relations = RelationSlicer(part.schema, part.book)
        return lambda lp: relations.arrays(lp.rank, lp.halo_gid)

    def disk_bytes(self, part):
        s = part.schema
        return 4 * (len(s.relations) * (int(part.csr.num_nodes) + part.book.parts) + len(s.rel_src))  # int32

    def read(self, t, meta, n_owned, n_halo):
        # its HeteroSchema, the type of every local node and each relation's (rowptr, col),
        # [n_owned, n_owned + n_halo] in local ids (partition.hetero); None and () on a homogeneous graph
        schema = HeteroSchema.from_meta(meta["hetero"]) if "hetero" in meta else None
        return {"hetero": schema, "node_type": node_types(schema, t["orig_id"]), "relations": relations(t)}


def node_types(schema: HeteroSchema | None, orig_id: Tensor) -> Tensor | None:
    """The type index of every local node of a typed graph (its dataset id's range), else None.
    ``[n_owned + n_halo]``"""
    if schema is None:
        return None
    offsets = torch.tensor(schema.offsets, dtype=torch.int64, device=orig_id.device)
    return torch.searchsorted(offsets, orig_id.long(), right=True) - 1


def relations(t: dict) -> tuple[tuple[Tensor, Tensor], ...]:
    """``(rowptr, col)`` of each relation of a typed graph's part (``rel_rowptr`` ``[R, n_owned + 1]``, ``rel_col``),
    columns in ``[0, n_owned + n_halo)``, else (); in the dtype stored (int32 since partition format 2, int64
    before). :class:`~gnndist.graph.DistGraph` makes the kernels' CSRs of them (this layer is below kernels)."""
    if "rel_rowptr" not in t:
        return ()
    rowptr, col = t["rel_rowptr"], t["rel_col"]
    return tuple((rp - rp[0], col[rp[0] : rp[-1]]) for rp in rowptr)


class LinkSplit(Component):
    """A link-prediction split: this part's slice of each pair array and of the id directory (``link_<name>``,
    :mod:`~gnndist.partition.link`), and META.json's ``link`` (metric, kind, counts). The link task's."""

    name = "link split"
    meta_key = "link"

    def held(self, part):
        return link_of(part.data) is not None

    def meta(self, part):
        return {"link": link_of(part.data).to_meta()}

    def writer(self, part, counts):
        split, book = link_of(part.data), part.book
        return lambda lp: link_arrays(split, book.old2new, lp.rank, book.parts)

    def disk_bytes(self, part):
        return link_bytes(link_of(part.data), int(part.csr.num_nodes))

    def memory(self, rank):
        return 0  # not modelled: the training peak is a node task's

    def read(self, t, meta, n_owned, n_halo):
        # this rank's slice of each pair array and of the id directory, by name (train, valid, valid_neg, test,
        # test_neg, home), else None
        return {"link": {k.removeprefix(LINK_PREFIX): v for k, v in t.items() if k.startswith(LINK_PREFIX)} or None}


STRUCTURE, FEATURES, LABELS, EXCHANGES, MASKS_PART = Structure(), Features(), Labels(), Exchanges(), Masks()
EDGE_FEATURES, EDGE_WEIGHTS, RELATIONS, LINK_SPLIT = EdgeFeatures(), EdgeWeights(), Relations(), LinkSplit()
COMPONENTS: list[Component] = [STRUCTURE, FEATURES, LABELS, EXCHANGES, MASKS_PART, EDGE_FEATURES, RELATIONS,
                               LINK_SPLIT, EDGE_WEIGHTS]
# what a plain node-classification part holds in memory while it trains (the training peak's model graph)
NODE_PART = (STRUCTURE, FEATURES, LABELS, MASKS_PART)


def register_component(component: Component) -> Component:
    """Add ``component`` to :data:`COMPONENTS` (after those there; one already there is kept in its place)."""
    held = {c.name: c for c in COMPONENTS}
    if component.name in held and held[component.name] is not component:
        raise ValueError(f"a part component named {component.name!r} is registered already")
    if component.name not in held:
        COMPONENTS.append(component)
    return component


def held_by(part: Partition) -> list[Component]:
    """The components the partitioned graph has, in :data:`COMPONENTS`' order."""
    return [c for c in COMPONENTS if c.held(part)]


def read_fields(t: dict[str, Tensor], meta: dict, n_owned: int, n_halo: int) -> dict[str, Any]:
    """Every component's :class:`~gnndist.graph.DistGraph` fields of one part (``t``: its arrays as tensors)."""
    out: dict[str, Any] = {}
    for c in COMPONENTS:
        out.update(c.read(t, meta, n_owned, n_halo))
    return out


def training_rows_bytes(rank: RankRows, components=NODE_PART) -> int:
    """Resident bytes of ``components``' rows on a training rank (their :meth:`Component.memory` terms)."""
    return sum(c.memory(rank) for c in components)
