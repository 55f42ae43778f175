"""Heterogeneous graphs as one union graph: typed nodes in contiguous id ranges, one relation id per edge.

A PyG ``HeteroData`` (a saved file, the OGB raw layout of ogbn-mag, or ``synthetic-mag-<N>``) becomes the
contract's homogeneous ``Data`` over every node (the *union graph*, which partitions like any graph), plus
``data.hetero``, a :class:`HeteroSchema`: the node types in order (type ``t`` owns the dataset ids
``offsets[t] : offsets[t + 1]``), the relations ``(src_type, name, dst_type)`` and every relation edge
``rel_src[e] -> rel_dst[e]`` of relation ``rel_type[e]`` (dataset ids), which the partition carries
into each rank's per-relation CSR.

Decisions:

* Reverse relations are added as PyG's ``ToUndirected`` names them: ``(dst, "rev_<rel>", src)`` for a
  relation between two types (unless the data has it already), and a relation inside one type is made
  symmetric in place. Relation edges are deduplicated; self-loops inside one type are kept.
* Only types with ``x`` are featured; features of several featured types are zero-padded to the widest.
  Featureless types get zero rows in ``x`` and a learnable embedding in the models that read the schema
  (:class:`gnndist.nn.NodeEmbedding`). With no featured type at all, ``x`` is ``[N, 64]`` of zeros.
* The target (labelled) type is the one type with ``y``, or ``--target TYPE``; it must have a split
  (``train_mask``/``val_mask``/``test_mask``). Other types get ``y = -1`` and empty masks.
* An empty relation is kept (it has a weight, whose gradient is zero).
"""

from __future__ import annotations

import os.path as osp
import re
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnndist.errors import UserError

from .graph import clean_edges, make_data
from .schema import HeteroSchema, schema_of
from .spec import loading_spec, register, register_format

if TYPE_CHECKING:
    from torch_geometric.data import Data, HeteroData

NO_FEATURE_WIDTH = 64  # x's width when no type has features (every type then learns an embedding)
SYNTHETIC_MAG_RE = re.compile(r"^synthetic-mag-(\d+)([km]?)$", re.IGNORECASE)
WORDS_SUFFIX = "-paper-word"  # <bag-of-words dataset>-paper-word: its columns become a featureless node type


def from_hetero(hd: HeteroData, name: str, target: str | None = None, reverse: bool = True,
                num_classes: int | None = None) -> Data:
    """The union graph of ``hd`` with its :class:`HeteroSchema` as ``data.hetero`` (see the module's decisions).

    ``num_classes``: the task's class count (OGB's table for ``ogbn-mag``); default: the largest label + 1.

    Raises a one-line :class:`UserError` for a relation naming an unknown type, ids out of range for
    their type, a type with no nodes, labels on a type without a split, or a ``target`` without labels.

    Shapes:
        x ``[N, F]`` (N: every type's nodes), y ``[N]`` (``-1`` outside the target type), masks ``[N]``
    """
    types, counts = _node_types(hd, name)
    offsets = np.zeros(len(types) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    index = {t: i for i, t in enumerate(types)}
    rels = _relations(hd, name, types, counts)
    if reverse:
        rels = with_reverse(rels)
    relations = list(rels)
    empty = [np.zeros(0, np.int64)]
    rel_src = np.concatenate([rels[et][0] + offsets[index[et[0]]] for et in relations] or empty)
    rel_dst = np.concatenate([rels[et][1] + offsets[index[et[2]]] for et in relations] or empty)
    rel_type = np.concatenate([np.full(len(rels[et][0]), i, np.int64) for i, et in enumerate(relations)] or empty)
    n = int(offsets[-1])
    rel_src, rel_dst, rel_type = _dedupe(rel_src, rel_dst, rel_type, n)
    target = _target(hd, types, target, name)
    x, featured = _features(hd, types, counts, offsets)
    ti = index[target]
    y = torch.full((n,), -1, dtype=torch.long)
    yt = hd[target].y.view(-1).long()
    if yt.numel() != counts[ti]:
        raise UserError(f"{name}: type {target!r} has {counts[ti]} nodes but {yt.numel()} labels")
    y[offsets[ti] : offsets[ti + 1]] = yt
    if num_classes is None:
        num_classes = int(yt.max()) + 1 if yt.numel() else 0
    data = make_data(x, y, clean_edges(rel_src, rel_dst, n), name, num_classes)
    for m in ("train_mask", "val_mask", "test_mask"):
        mask = torch.zeros(n, dtype=torch.bool)
        mt = hd[target][m].view(-1).bool()
        if mt.numel() != counts[ti]:
            raise UserError(f"{name}: type {target!r}: {m} has {mt.numel()} entries for {counts[ti]} nodes")
        mask[offsets[ti] : offsets[ti + 1]] = mt & (yt >= 0)
        setattr(data, m, mask)
    edges = np.bincount(rel_type, minlength=len(relations)).tolist()  # [R]
    data.hetero = HeteroSchema(types, tuple(int(o) for o in offsets), relations, featured, target, edges, rel_src,
                               rel_dst, rel_type)
    return data


def _node_types(hd: HeteroData, name: str) -> tuple[list[str], list[int]]:
    """The node types of ``hd`` in order and their node counts; one line for none, or a type with no nodes."""
    types = list(hd.node_types)
    if not types:
        raise UserError(f"{name}: the heterogeneous graph has no node types")
    counts = []
    for t in types:
        n = hd[t].num_nodes
        if not n:
            raise UserError(f"{name}: node type {t!r} has no nodes")
        counts.append(int(n))
    return types, counts


def _relations(hd: HeteroData, name: str, types: list[str], counts: list[int]) -> dict:
    """``{(src, rel, dst): (src ids, dst ids)}`` of ``hd``'s relations (ids within each type), checked: known
    types, ``[2, E]`` edge indices, ids in range for their type."""
    index = {t: i for i, t in enumerate(types)}
    rels: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
    for et in hd.edge_types:
        s, r, d = et
        for end in (s, d):
            if end not in index:
                raise UserError(f"{name}: relation ({s}, {r}, {d}) names the unknown node type {end!r} "
                                f"(node types: {', '.join(types)})")
        ei = hd[et].get("edge_index")
        if ei is None:
            ei = torch.zeros(2, 0, dtype=torch.long)
        if ei.dim() != 2 or ei.size(0) != 2:
            raise UserError(f"{name}: relation ({s}, {r}, {d}): edge_index must be [2, E], got {tuple(ei.shape)}")
        src, dst = ei[0].long().numpy(), ei[1].long().numpy()
        for ids, t, end in ((src, s, "source"), (dst, d, "destination")):
            n = counts[index[t]]
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise UserError(f"{name}: relation ({s}, {r}, {d}): {end} ids in [{ids.min()}, {ids.max()}] are out "
                                f"of range for type {t!r} ({n} nodes, valid 0..{n - 1})")
        rels[et] = (src, dst)
    return rels


def _features(hd: HeteroData, types: list[str], counts: list[int], offsets: np.ndarray) -> tuple[Tensor, list[bool]]:
    """``x`` of the union graph (each featured type's rows zero-padded to the widest; zeros elsewhere) and which
    types are featured.

    Shapes:
        x ``[N, F]``: F the widest featured type's width, else :data:`NO_FEATURE_WIDTH`
    """
    featured = [hd[t].get("x") is not None for t in types]
    width = max([int(hd[t].x.view(counts[i], -1).shape[1]) for i, t in enumerate(types) if featured[i]]
                or [NO_FEATURE_WIDTH])
    x = torch.zeros(int(offsets[-1]), width)
    for i, t in enumerate(types):
        if featured[i]:
            xt = hd[t].x.view(counts[i], -1).float()
            x[offsets[i] : offsets[i + 1], : xt.shape[1]] = xt
    return x, featured


def with_reverse(rels: dict) -> dict:
    """PyG ``ToUndirected``'s reverse relations: ``(d, rev_<r>, s)`` added beside ``(s, r, d)`` when absent,
    a relation inside one type symmetrised in place (``{(s, r, d): (src, dst)}`` in, the same out)."""
    out = {}
    for (s, r, d), (src, dst) in rels.items():
        if s == d:
            out[s, r, d] = (np.concatenate([src, dst]), np.concatenate([dst, src]))
        else:
            out[s, r, d] = (src, dst)
    for (s, r, d), (src, dst) in rels.items():
        if s != d and (d, f"rev_{r}", s) not in rels and not (r.startswith("rev_") and (d, r[4:], s) in rels):
            out[d, f"rev_{r}", s] = (dst, src)
    return out


def _dedupe(src: np.ndarray, dst: np.ndarray, rel: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Each (relation, destination, source) once, sorted that way."""
    if not len(src):
        return src, dst, rel
    n = np.int64(n)
    key = np.unique((rel * n + dst) * n + src)  # fits int64 for R * N^2 < 2^63
    return key % n, (key // n) % n, key // (n * n)


def _target(hd: HeteroData, types: list[str], target: str | None, name: str) -> str:
    """The labelled type: ``target`` when given (it must have labels), else the one type with ``y``; it has a split."""
    labelled = [t for t in types if hd[t].get("y") is not None]
    if target is not None:
        if target not in types:
            raise UserError(f"--target {target!r} is not a node type of {name} (types: {', '.join(types)})")
        if target not in labelled:
            raise UserError(f"--target {target!r} has no labels in {name} (labelled types: "
                            f"{', '.join(labelled) or 'none'})")
    elif len(labelled) != 1:
        raise UserError(f"{name}: {'no node type has' if not labelled else 'several node types have'} labels "
                        f"({', '.join(labelled) or 'none'}): pass --target TYPE")
    else:
        target = labelled[0]
    missing = [m for m in ("train_mask", "val_mask", "test_mask") if hd[target].get(m) is None]
    if missing:
        raise UserError(f"{name}: type {target!r} has labels but no split ({', '.join(missing)} missing)")
    return target


# ---------------------------------------------------------------------------------------- synthetic-mag-<N>
def parse_synthetic_mag(name: str) -> int | None:
    """``synthetic-mag-2k`` -> 2000 papers; None for another name."""
    m = SYNTHETIC_MAG_RE.match(name)
    if m is None:
        return None
    n = int(m.group(1)) * {"": 1, "k": 10**3, "m": 10**6}[m.group(2).lower()]
    if n < 10:
        raise UserError(f"{name}: synthetic-mag needs at least 10 papers")
    return n


def synthetic_mag(papers: int, num_classes: int = 8, num_features: int = 32, seed: int = 0) -> HeteroData:
    """A graph with ogbn-mag's shape: paper, author, institution, field_of_study; four relations.

    Per paper, as in ogbn-mag (736,389 papers): 1.54 authors, 0.012 institutions, 0.081 fields of study;
    ``author writes paper`` ~3 per paper, ``paper cites paper`` ~4, ``paper has_topic field_of_study`` ~4,
    ``author affiliated_with institution`` ~1 per author, every endpoint drawn with Pareto weights
    (skewed degrees) and mostly inside the planted class of the paper. Only papers have features
    (class mean + noise), labels and a split (80 / 10 / 10 %, seeded).
    """
    from torch_geometric.data import HeteroData

    rng = np.random.default_rng(seed)
    n = {"paper": papers, "author": max(2, round(1.54 * papers)), "institution": max(2, round(0.012 * papers)),
         "field_of_study": max(2, round(0.081 * papers))}
    cls = {t: rng.integers(0, num_classes, k) for t, k in n.items()}
    weight = {t: rng.pareto(1.5, k) + 1.0 for t, k in n.items()}

    def pick(t: str, want: np.ndarray, p_in: float) -> np.ndarray:
        """One node of type ``t`` per entry, by weight, inside class ``want`` with probability ``p_in``."""
        out = np.empty(len(want), dtype=np.int64)
        inside = rng.random(len(want)) < p_in
        every = weight[t] / weight[t].sum()
        out[~inside] = rng.choice(n[t], int((~inside).sum()), p=every)
        for c in range(num_classes):
            sel = inside & (want == c)
            members = np.flatnonzero(cls[t] == c)
            if not len(members):
                members = np.arange(n[t])
            w = weight[t][members]
            out[sel] = members[rng.choice(len(members), int(sel.sum()), p=w / w.sum())]
        return out

    def sources(t: str, per: float) -> np.ndarray:
        k = rng.poisson(per * weight[t] / weight[t].mean())
        return np.repeat(np.arange(n[t]), k)

    hd = HeteroData()
    for t, k in n.items():
        hd[t].num_nodes = k
    centers = rng.normal(0, 1, (num_classes, num_features))
    hd["paper"].x = torch.from_numpy(centers[cls["paper"]] + rng.normal(0, 2.0, (papers, num_features))).float()
    hd["paper"].y = torch.from_numpy(cls["paper"])
    perm = rng.permutation(papers)
    a, b = int(0.8 * papers), int(0.9 * papers)
    for m, sel in (("train_mask", perm[:a]), ("val_mask", perm[a:b]), ("test_mask", perm[b:])):
        mask = torch.zeros(papers, dtype=torch.bool)
        mask[sel] = True
        hd["paper"][m] = mask
    for (s, r, d), per, p_in in ((("author", "affiliated_with", "institution"), 1.0, 0.5),
                                 (("author", "writes", "paper"), 2.0, 0.8),
                                 (("paper", "cites", "paper"), 4.0, 0.7),
                                 (("paper", "has_topic", "field_of_study"), 4.0, 0.8)):
        src = sources(s, per)
        dst = pick(d, cls[s][src], p_in)
        hd[s, r, d].edge_index = torch.from_numpy(np.stack([src, dst]))
    return hd


def load_synthetic_mag(name: str, root: str, seed: int = 0, target: str | None = None) -> Data:
    """``synthetic-mag-<N>`` (N papers) as its union graph (generated in memory, seeded; ``root`` unused)."""
    return from_hetero(synthetic_mag(parse_synthetic_mag(name), seed=seed), name.lower(), target)


# ---------------------------------------------------------------------------------------- <dataset>-paper-word
def paper_word(data: Data, keep_features: bool = True) -> HeteroData:
    """A bag-of-words citation graph as a typed one: ``paper`` (its nodes, labels, split, citations) and ``word``
    (one featureless node per feature column), ``(paper, has_word, word)`` for every nonzero feature.

    ``keep_features``: papers keep their feature rows (default); else both types learn embeddings.
    """
    from torch_geometric.data import HeteroData

    hd = HeteroData()
    hd["paper"].num_nodes = int(data.num_nodes)
    if keep_features:
        hd["paper"].x = data.x
    hd["paper"].y = data.y
    for m in ("train_mask", "val_mask", "test_mask"):
        hd["paper"][m] = getattr(data, m)
    hd["word"].num_nodes = int(data.x.shape[1])
    hd["paper", "cites", "paper"].edge_index = data.edge_index
    hd["paper", "has_word", "word"].edge_index = (data.x != 0).nonzero().t().contiguous()  # [2, nnz(x)]
    return hd


def parse_paper_word(name: str) -> str | None:
    """``cora-paper-word`` -> ``cora`` (the dataset whose feature columns become words); None for another name."""
    return name[: -len(WORDS_SUFFIX)] if name.endswith(WORDS_SUFFIX) and len(name) > len(WORDS_SUFFIX) else None


def load_paper_word(name: str, root: str, seed: int = 0, target: str | None = None) -> Data:
    """``<dataset>-paper-word``: the registered dataset, loaded from ``root``, as its paper-word union graph
    (:func:`paper_word`)."""
    from .registry import load

    words = parse_paper_word(name)
    if loading_spec(words) is None:
        raise UserError(f"unknown dataset {name!r}: {words} is not a registered dataset (<dataset>{WORDS_SUFFIX})")
    base = load(words, root, seed=seed)
    if bool((base.x < 0).any()) or schema_of(base) is not None or base.y.dim() != 1:
        raise UserError(f"{name}: {base.name} is not a single-label bag-of-words graph (features must be counts "
                        f"or weights >= 0)")
    return from_hetero(paper_word(base), name, target, num_classes=int(base.num_classes))


# ---------------------------------------------------------------------------------------- a saved HeteroData
def is_hetero_file(path: str) -> bool:
    """True for a ``torch.save`` archive whose pickle names PyG's ``HeteroData``."""
    import zipfile

    if not osp.isfile(path) or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        return bool(pkl) and b"HeteroData" in z.read(pkl[0])


def read_hetero_file(path: str, name: str, seed: int = 0, target: str | None = None) -> Data:
    """A ``torch.save``'d ``HeteroData`` (``weights_only``: tensors and PyG's classes only) as its union graph."""
    from torch_geometric.data.hetero_data import HeteroData as _HD
    from torch_geometric.data.storage import BaseStorage, EdgeStorage, NodeStorage

    try:
        with torch.serialization.safe_globals([_HD, BaseStorage, NodeStorage, EdgeStorage]):
            hd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise UserError(f"{path}: cannot load as a saved PyG HeteroData ({type(e).__name__}: {e})") from None
    if not isinstance(hd, _HD):
        raise UserError(f"{path}: holds a {type(hd).__name__}, not a HeteroData")
    return from_hetero(hd, name, target)


register("synthetic-mag-<N>[k|m]", load_synthetic_mag, pattern=SYNTHETIC_MAG_RE.pattern, typed=True)
register(f"<dataset>{WORDS_SUFFIX}", load_paper_word, pattern=f"(.+){WORDS_SUFFIX}", typed=True)
register_format("hetero", read_hetero_file, is_hetero_file, typed=True)  # before "pyg": both are torch.save zips
