"""DistGraph's views (issue 60): one constructor, ``DistGraph._view``, replaces one whole group of
:attr:`DistGraph.VIEW_FIELDS` and shares every other field; a view never reads what was derived from another
structure (or another split); the GCN scale is one function, the old formula bit for bit."""

import numpy as np
import pytest
import torch

from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph, gcn_scale
from gnndist.nn.conv.message_passing import local_edges
from gnndist.testing import QUICK_PARTITION

GROUPS = DistGraph.VIEW_FIELDS
SPLITS = 3


def _with_splits(data, seed=0):
    """``data`` with SPLITS random 50/25/25 splits of its nodes, split 0 current."""
    from gnndist.datasets.split import set_splits

    n, gen = data.num_nodes, torch.Generator().manual_seed(seed)
    rank = torch.stack([torch.randperm(n, generator=gen) for _ in range(SPLITS)], dim=1)  # [N, K]
    return set_splits(data, rank < n // 2, (rank >= n // 2) & (rank < 3 * n // 4), rank >= 3 * n // 4, "random")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A 1-part homogeneous graph with SPLITS splits, an edge split and its message graph of training + validation
    edges (the sub-partition ``valedges``)."""
    from gnndist.datasets import synthetic
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split
    from gnndist.partition import partition

    data = synthetic(160, avg_degree=6, num_classes=3, num_features=8, seed=4)
    data = set_edge_split(data, *random_edge_split(data.edge_index, 160, (0.7, 0.15, 0.15), seed=3))
    d = tmp_path_factory.mktemp("views")
    partition(_with_splits(data), 1, progress=False, **QUICK_PARTITION).save(d, dataset="toy", progress=False,
                                                                             valedges=True)
    return d


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """A 1-part typed graph (ogbn-mag's shape: relations within a type and between two) with SPLITS splits."""
    from gnndist.datasets.hetero import from_hetero, synthetic_mag
    from gnndist.partition import partition

    data = _with_splits(from_hetero(synthetic_mag(60, num_classes=3, num_features=4, seed=1), "toy-mag"))
    d = tmp_path_factory.mktemp("typed")
    partition(data, 1, progress=False, **QUICK_PARTITION).save(d, dataset="toy-mag", progress=False)
    return d


def _load(root) -> DistGraph:
    return DistGraph.load(root, ProcessGrid())


def _not_shared(view: DistGraph, graph: DistGraph, names) -> list[str]:
    """The fields of ``names`` that ``view`` does not hold as the same object as ``graph``."""
    return [k for k in names if getattr(view, k) is not getattr(graph, k)]


def test_every_field_is_declared_once(plain, typed):
    """Each field of a built-in graph is in one group of VIEW_FIELDS: a new field fails here until it says what a
    view does with it (a task's own part components give owned rows: shared)."""
    declared = [k for group in GROUPS.values() for k in group]
    assert len(declared) == len(set(declared)), "a field in two groups"
    for g in (_load(plain), _load(typed)):
        for view in (g, g.with_split(1), *(g.relation(r) for r in range(len(g.relations)))):
            assert sorted(vars(view)) == sorted(declared)
    assert sorted(vars(_load(plain).sub_partition("valedges"))) == sorted(declared)


def test_with_split_replaces_the_split_alone(plain):
    g = _load(plain)
    csr, edges = g.csr, local_edges(g)  # the derived cache, filled before the views
    for k in range(SPLITS):
        view = g.with_split(k)
        assert _not_shared(view, g, GROUPS["shared"] + GROUPS["structure"]) == []
        for mask, stored in zip(("train_mask", "val_mask", "test_mask"), ("train_masks", "val_masks", "test_masks")):
            assert torch.equal(getattr(view, mask), g.splits[stored][:, k])
        assert view.num_train == int(g.splits["train_masks"][:, k].sum())
        assert view.csr is csr and local_edges(view) is edges  # same structure: its derived values, built once
    assert not torch.equal(g.with_split(1).train_mask, g.with_split(2).train_mask)


def test_sub_partition_rebuilds_its_structure_and_shares_the_rest(plain):
    from gnndist.partition.format import read_inner, read_part

    g = _load(plain)
    csr, edges = g.csr, local_edges(g)  # the parent's derived cache, filled
    view = g.sub_partition("valedges")
    assert _not_shared(view, g, GROUPS["shared"] + GROUPS["split"]) == []
    own = ("structure", "strategy", "halo_gid", "orig_id", "degree", "gcn_scale", "_derived")
    assert _not_shared(view, g, own) == list(own)
    stored = read_part(plain / "valedges", 0, read_inner(plain, "valedges", g.meta))
    assert view.csr is not csr and view.csr.nnz == len(stored["col"]) > csr.nnz  # training + validation edges
    assert np.array_equal(view.csr.col.numpy(), stored["col"]) and view.n_halo == len(stored["halo_gid"])
    assert local_edges(view) is not edges and local_edges(view).row.numel() == view.csr.nnz
    assert torch.equal(view.orig_id[: g.n_owned], g.orig_id[: g.n_owned])  # the same owners, their own halo
    assert torch.equal(view.degree, torch.from_numpy(stored["degree"]))
    assert view.edge_attr is None and view.relation_of is None and view.n_owned == g.n_owned
    again = g.sub_partition("valedges")  # its structure and what is derived from it: built once
    assert again.structure is view.structure and local_edges(again) is local_edges(view)


def test_relation_rebuilds_its_structure_and_shares_the_rest(typed):
    g = _load(typed)
    csr = g.csr  # the parent's derived cache, filled
    n = g.n_owned
    for r, (src, _, dst) in enumerate(g.hetero.relations):
        view = g.relation(r)
        # the same halo and ids: a relation's rows of A are read over the part's own halo and plans
        assert _not_shared(view, g, GROUPS["shared"] + GROUPS["split"] + ("halo_gid", "orig_id", "node_type")) == []
        own = ("structure", "strategy", "degree", "gcn_scale", "_derived")
        assert _not_shared(view, g, own) == list(own)
        rel = g.relations[r]
        assert view.csr is not csr and torch.equal(view.csr.rowptr.long(), rel.rowptr.long())
        assert torch.equal(view.csr.col.long(), rel.col.long()) and view.n_halo == g.n_halo
        assert torch.equal(view.degree[:n].long(), rel.rowptr.diff().long())  # in-degree within the relation
        assert src == dst or bool((view.degree[n:] == -1).all())  # between two types: no symmetric normalisation
        assert view.edge_attr is None and view.relation_of == r
        assert g.relation(r).structure is view.structure  # built once per relation


def test_a_split_view_reads_its_own_split_through_a_relation(typed):
    """The structures of a graph's views are kept with its derived values; the view a split view asks for carries
    that split's masks, not those of the graph that first built the structure."""
    g = _load(typed)
    first = g.relation(0)
    split = g.with_split(1)
    view = split.relation(0)
    assert view.train_mask is split.train_mask and not torch.equal(view.train_mask, first.train_mask)
    assert view.structure is first.structure and view.csr is first.csr


def test_gcn_scale_is_the_old_formula(plain, typed):
    g, t = _load(plain), _load(typed)
    for view in (g, g.with_split(2), g.sub_partition("valedges"), t, *(t.relation(r) for r in range(len(t.relations)))):
        assert view.gcn_scale.dtype == torch.float64
        assert torch.equal(view.gcn_scale, (view.degree.double() + 1.0).rsqrt())
    degree = torch.tensor([0, 1, 2, 7, 1000, -1], dtype=torch.int32)  # -1: a relation's halo between two types
    assert torch.equal(gcn_scale(degree), (degree.double() + 1.0).rsqrt())


def test_a_view_refuses_a_partial_group(plain):
    g = _load(plain)
    with pytest.raises(TypeError, match="one whole group"):
        g._view(train_mask=~g.train_mask)  # the training count would be the other split's
    with pytest.raises(TypeError, match="one whole group"):
        g._view(structure=g.structure)  # the strategy, degrees and derived values would be the other structure's
