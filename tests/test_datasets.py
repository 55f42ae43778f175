"""Dataset layer: registry, loaders of every format, synthetic graphs, bad input."""

import pytest
import torch
from gnndist.datasets import load, names, synthetic, validate

from gnndist.errors import UserError


def assert_clean(data):
    """Symmetric, sorted by (row, col), no duplicates, no self-loops."""
    ei = data.edge_index
    n = data.num_nodes
    assert ei.dtype == torch.int64
    assert not bool((ei[0] == ei[1]).any())
    key = ei[0] * n + ei[1]
    assert bool((key[1:] > key[:-1]).all())  # strictly increasing: sorted and unique
    rev = torch.sort(ei[1] * n + ei[0]).values
    assert torch.equal(rev, key)
    validate(data)


def test_cora_bundled_counts(tmp_path):
    data = load("cora", root=str(tmp_path))
    assert data.num_nodes == 2708
    assert data.edge_index.size(1) == 10556
    assert data.x.shape == (2708, 1433) and data.x.dtype == torch.float32
    assert data.y.dtype == torch.int64 and data.num_classes == 7
    assert [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)] == [
        140,
        500,
        1000,
    ]
    assert data.name == "cora"
    assert_clean(data)


def test_names_and_unknown():
    assert {"cora", "citeseer", "pubmed"} <= set(names())
    with pytest.raises(UserError, match="unknown dataset 'nope'.*cora"):
        load("nope")


def test_synthetic_deterministic_clean_skewed():
    a = synthetic(3000, avg_degree=12, seed=1)
    b = synthetic(3000, avg_degree=12, seed=1)
    c = synthetic(3000, avg_degree=12, seed=2)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(a[key], b[key]), key
    assert (
        not torch.equal(a.edge_index, c.edge_index)
        if a.edge_index.shape == c.edge_index.shape
        else True
    )
    assert_clean(a)
    deg = a.edge_index[0].bincount(minlength=a.num_nodes).float()
    assert 0.8 * 12 < deg.mean() <= 12
    assert deg.max() > 5 * deg.median()  # heavy tail
    homophily = (a.y[a.edge_index[0]] == a.y[a.edge_index[1]]).float().mean()
    assert homophily > 0.5
    assert int(a.train_mask.sum()) == 20 * 8 and int(a.val_mask.sum()) == 30 * 8


def test_synthetic_name():
    data = load("synthetic-2k")
    assert data.num_nodes == 2000 and data.name == "synthetic-2k"
    assert load("synthetic-2k-d8").edge_index.size(1) <= 2000 * 8
