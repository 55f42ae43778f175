"""Link-prediction data: the seeded random edge split, and OGB's ogbl-* layout written and read back offline."""

import numpy as np
import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.datasets.edge_split import EdgeSplit, parse_edge_split, random_edge_split, set_edge_split
from gnndist.datasets.graph import clean_edges, summed_weights
from gnndist.datasets.ogbl import load_ogbl, write_ogbl
from gnndist.datasets.spec import dataset_spec

from gnndist.errors import UserError


def pair_set(pairs: torch.Tensor) -> set[tuple[int, int]]:
    return {(int(u), int(v)) for u, v in pairs.tolist()}


def undirected(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in edge_index.t().tolist() if u != v}


@pytest.fixture(scope="module")
def raw_graph():
    """A messy edge list: both directions, duplicates and self-loops."""
    g = torch.Generator().manual_seed(3)
    n = 400
    ei = torch.randint(0, n, (2, 2500), generator=g)
    ei = torch.cat([ei, ei.flip(0)[:, :700], ei[:, :300], torch.arange(20).repeat(2, 1)], dim=1)
    return ei, n


def test_random_split_partitions_the_edges(raw_graph):
    ei, n = raw_graph
    edges = undirected(ei)
    split, message = random_edge_split(ei, n, (0.85, 0.05, 0.10), seed=0)
    e = len(edges)
    assert (len(split.valid), len(split.test)) == (int(0.05 * e), int(0.10 * e))  # PyG's rounding down
    assert len(split.train) == e - int(0.05 * e) - int(0.10 * e)
    train, valid, test = pair_set(split.train), pair_set(split.valid), pair_set(split.test)
    assert len(train) + len(valid) + len(test) == e and train | valid | test == edges  # disjoint, complete
    assert all(u < v for u, v in train | valid | test)
    assert split.metric == "auc" and split.kind == "random" and not split.per_positive
    assert message.shape == (2, 2 * len(train))
    directed = pair_set(message.t())
    assert directed == train | {(v, u) for u, v in train}
    assert not directed & (valid | test | {(v, u) for u, v in valid | test})  # no held-out edge, either direction
    assert torch.equal(message, clean_edges(message[0].numpy(), message[1].numpy(), n))  # sorted, symmetric


def test_random_split_negatives_are_distinct_non_edges(raw_graph):
    ei, n = raw_graph
    edges = undirected(ei)
    split, _ = random_edge_split(ei, n, (0.7, 0.1, 0.2), seed=5)
    assert split.valid_neg.shape == split.valid.shape and split.test_neg.shape == split.test.shape
    neg = torch.cat([split.valid_neg, split.test_neg])
    assert neg.dtype == torch.int64 and bool((neg[:, 0] < neg[:, 1]).all()) and int(neg.max()) < n
    assert len(pair_set(neg)) == len(neg)  # distinct, also between valid and test
    assert not pair_set(neg) & edges


def test_negatives_when_almost_every_pair_is_an_edge():
    """K_10 less 18 edges: 10 negatives must come out of 18 non-edges (most draws are rejected)."""
    n = 10
    full = [(u, v) for u in range(n) for v in range(u + 1, n)]
    kept = full[18:]
    ei = torch.tensor(kept).t()
    split, _ = random_edge_split(ei, n, (0.6, 0.2, 0.2), seed=1)
    neg = pair_set(torch.cat([split.valid_neg, split.test_neg]))
    assert len(neg) == 2 * int(0.2 * len(kept)) and neg <= set(full[:18])
    with pytest.raises(UserError, match="--edge-split: .* 0 node pairs without an edge"):
        random_edge_split(torch.tensor(full).t(), n, (0.6, 0.2, 0.2))


def test_random_split_is_seeded(raw_graph):
    ei, n = raw_graph
    a, ma = random_edge_split(ei, n, seed=7)
    b, mb = random_edge_split(ei, n, seed=7)
    c, _ = random_edge_split(ei, n, seed=8)
    for k, v in a.arrays().items():
        assert torch.equal(v, b.arrays()[k]), k
    assert torch.equal(ma, mb)
    assert not torch.equal(a.valid, c.valid) and not torch.equal(a.valid_neg, c.valid_neg)


def test_set_edge_split(raw_graph):
    ei, n = raw_graph
    data = synthetic(n, avg_degree=4, num_features=3, seed=0)
    split, message = random_edge_split(data.edge_index, n)
    assert set_edge_split(data, split, message) is data
    assert data.link is split and data.edge_index is message


def test_parse_edge_split():
    assert parse_edge_split("85,5,10") == pytest.approx((0.85, 0.05, 0.10), abs=1e-12)
    assert parse_edge_split("0.8, 0.1, 0.1") == pytest.approx((0.8, 0.1, 0.1), abs=1e-12)
    assert parse_edge_split("100,0,0") == (1.0, 0.0, 0.0)


@pytest.mark.parametrize("text, message", [
    ("85,15", "three numbers"), ("a,b,c", "three numbers"), ("90,5,10", "sum to 1"),
    ("0.5,0.2,0.2", "sum to 1"), ("110,-5,-5", ">= 0"), ("0,50,50", "training fraction"),
], ids=["two", "words", "sum-105", "sum-0.9", "negative", "no-train"])
def test_bad_edge_split_is_one_line(text, message):
    with pytest.raises(UserError, match=message) as e:
        parse_edge_split(text)
    assert "--edge-split" in str(e.value) and "\n" not in str(e.value)


def test_bad_fractions_and_tiny_graphs(raw_graph):
    ei, n = raw_graph
    with pytest.raises(UserError, match="--edge-split: fractions must sum to 1"):
        random_edge_split(ei, n, (0.9, 0.1, 0.1))
    tiny = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    with pytest.raises(UserError, match=r"4 undirected edges, too few .* \(4/0/0\)") as e:
        random_edge_split(tiny, 5)
    assert "\n" not in str(e.value)
    split, _ = random_edge_split(tiny, 5, (0.5, 0.0, 0.5))  # a zero fraction: an empty split, no error
    assert split.valid.shape == (0, 2) and split.valid_neg.shape == (0, 2) and len(split.test) == 2


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """Our data root (OGB's processed files go there), apart from the 'shared' folder the datasets are read from."""
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "ours"))
    return tmp_path / "shared"


def snapshot(folder):
    return {(p.relative_to(folder), p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_ogbl_collab_round_trip(data_root):
    data = synthetic(300, avg_degree=6, num_features=5, seed=2)
    split, message = random_edge_split(data.edge_index, 300, seed=4)
    split.train_weight = torch.randint(1, 4, (len(split.train),))
    set_edge_split(data, split, message)
    folder = write_ogbl(data, str(data_root), "ogbl-collab")
    before = snapshot(data_root)
    for _ in range(2):  # OGB processes, then reads its processed file
        back = dataset_spec("ogbl-collab").load("ogbl-collab", str(data_root), 0, None)
        assert back.link.metric == "hits@50" and back.link.kind == "ogb" and back.link.valid_as_input
        for k, v in split.arrays().items():
            assert torch.equal(back.link.arrays()[k], v), k
        assert torch.equal(back.x, data.x) and torch.equal(back.edge_index, message)
        assert torch.equal(back.y, torch.full((300,), -1)) and back.num_classes == 0  # unlabelled
        assert back.name == "ogbl-collab" and not back.train_mask.any() and back.get("featureless") is None
        pair = {(min(u, v), max(u, v)): float(w) for (u, v), w in zip(split.train.tolist(), split.train_weight)}
        assert back.edge_weight.tolist() == [pair[min(u, v), max(u, v)] for u, v in back.edge_index.t().tolist()]
    assert folder == str(data_root / "ogbl_collab") and snapshot(data_root) == before  # never written into


def test_edge_weights_of_duplicate_rows_add_up():
    """OGB's collab lists a pair once per year (both directions): the message graph's weight is their sum, as its
    sparse adjacency sums them; a list that gives an edge in one direction weighs both."""
    src, dst = np.array([0, 1, 0, 1, 2, 3]), np.array([1, 0, 1, 0, 3, 2])  # (0, 1) twice, both ways; (2, 3) once
    w = np.array([1.0, 1.0, 2.0, 2.0, 5.0, 5.0])
    ei = clean_edges(src, dst, 4)
    assert summed_weights(ei, src, dst, w, 4).tolist() == [3.0, 3.0, 5.0, 5.0]
    one_way = clean_edges(np.array([0, 2]), np.array([1, 3]), 4)
    assert summed_weights(one_way, np.array([0, 2]), np.array([1, 3]), np.array([1.5, 4.0]), 4).tolist() == \
        [1.5, 1.5, 4.0, 4.0]


def test_ogbl_ddi_is_featureless(data_root):
    data = synthetic(200, avg_degree=6, num_features=4, seed=3)
    write_ogbl(data, str(data_root), "ogbl-ddi", seed=1)  # no split given: a seeded random one
    back = load_ogbl("ogbl-ddi", str(data_root))
    expected, message = random_edge_split(data.edge_index, 200, seed=1)
    assert back.x.shape == (200, 0) and back.featureless is True
    assert back.link.metric == "hits@20" and not back.link.valid_as_input and back.link.train_weight is None
    assert torch.equal(back.link.valid_neg, expected.valid_neg) and torch.equal(back.edge_index, message)


def test_ogbl_citation2_negatives_per_positive(data_root):
    data = synthetic(250, avg_degree=6, num_features=3, seed=4)
    shared, message = random_edge_split(data.edge_index, 250, seed=2)
    g = torch.Generator().manual_seed(0)
    neg = [torch.randint(0, 250, (len(pos), 7), generator=g) for pos in (shared.valid, shared.test)]  # [n, K]
    split = EdgeSplit(shared.train, shared.valid, shared.test, *neg, metric="mrr")
    write_ogbl(data, str(data_root), "ogbl-citation2", split=split)
    back = load_ogbl("ogbl-citation2", str(data_root))
    assert back.link.metric == "mrr" and back.link.per_positive and back.link.valid_neg.shape == (len(split.valid), 7)
    for k, v in split.arrays().items():
        assert torch.equal(back.link.arrays()[k], v), k
    assert torch.equal(back.edge_index, message)  # citation2's directed training edges, symmetrised
    assert torch.equal(back.x, data.x)
    with pytest.raises(UserError, match="ogbl-citation2 ranks each positive against its own negatives"):
        write_ogbl(data, str(data_root), "ogbl-citation2", split=shared)


def test_ogbl_missing_folder(tmp_path):
    with pytest.raises(UserError, match=r"ogbl-ppa: missing raw/edge\.csv\.gz.* under .*ogbl_ppa; .*"
                                        r"PygLinkPropPredDataset.*ppassoc\.zip") as e:
        load_ogbl("ogbl-ppa", str(tmp_path))
    assert "\n" not in str(e.value)
    split_only = tmp_path / "ogbl_collab" / "split" / "time"
    split_only.mkdir(parents=True)
    with pytest.raises(UserError, match="ogbl-collab: missing .*raw/edge_weight.csv.gz"):
        load_ogbl("ogbl-collab", str(tmp_path))


def test_ogb_layout_of_positive_pairs_is_unchanged_by_writing(data_root):
    """write_ogbl saves each split array on its own (a view would carry its base's storage into the .pt)."""
    data = synthetic(150, avg_degree=5, num_features=2, seed=6)
    split, _ = random_edge_split(data.edge_index, 150, seed=0)
    folder = write_ogbl(data, str(data_root), "ogbl-ppa", split=split)
    valid = torch.load(f"{folder}/split/throughput/valid.pt")
    assert set(valid) == {"edge", "edge_neg"}
    assert valid["edge_neg"].untyped_storage().nbytes() == split.valid_neg.numel() * 8
    assert np.array_equal(valid["edge"].numpy(), split.valid.numpy())
