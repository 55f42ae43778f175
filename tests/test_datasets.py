"""Dataset layer: registry, loaders of every format, synthetic graphs, bad input."""

import gzip
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from gnndist.datasets import default_root, load, names, synthetic, validate, write_ogb
from gnndist.datasets.split import per_class_split

from gnndist.errors import UserError
from gnndist.testing import assert_clean, shared_data

SHARED = shared_data()
BUNDLE = os.path.join(os.path.dirname(__file__), "..", "datasets", "bundled", "cora")
KEYS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")


def shared(rel):
    path = os.path.join(SHARED, rel)
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    return path


def assert_same(a, b):
    for key in KEYS:
        assert torch.equal(a[key], b[key]), key


def split_sizes(data):
    return [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]


def per_class(mask, y, num_classes):
    return torch.bincount(y[mask], minlength=num_classes).tolist()


def write_heterophily(path, n=6, **override):
    arrays = {
        "node_features": np.ones((n, 3), dtype=np.float32),
        "node_labels": np.arange(n) % 2,
        "edges": np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]),
        "train_masks": np.tile(np.arange(n) < 2, (2, 1)),
        "val_masks": np.tile((np.arange(n) >= 2) & (np.arange(n) < 4), (2, 1)),
        "test_masks": np.tile(np.arange(n) >= 4, (2, 1)),
    }
    arrays.update(override)
    np.savez(path, **arrays)
    return str(path)


# ---------------------------------------------------------------- registry


def test_names_and_root(monkeypatch):
    assert {
        "cora",
        "citeseer",
        "pubmed",
        "amazon-photo",
        "coauthor-cs",
        "ogbn-arxiv",
    } <= set(names())
    monkeypatch.setenv("GNNDIST_DATA", "/some/where")
    assert default_root() == "/some/where"
    monkeypatch.delenv("GNNDIST_DATA")
    assert default_root().endswith(os.path.join(".cache", "gnndist"))


def test_unknown_name_lists_known():
    with pytest.raises(UserError, match=r"unknown dataset 'nope'.*cora.*synthetic"):
        load("nope")


def test_missing_path(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        load(str(tmp_path / "absent.npz"))


def test_unknown_format(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("0 1\n")
    with pytest.raises(UserError, match="unknown --format 'xml'"):
        load(str(path), format="xml")


def test_unrecognised_file(tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x00\x01garbage\xff" * 10)
    with pytest.raises(UserError, match="format not recognised"):
        load(str(path))


# ---------------------------------------------------------------- Planetoid


def test_cora_bundled_counts(tmp_path):
    data = load("cora", root=str(tmp_path))
    assert data.num_nodes == 2708 and data.edge_index.size(1) == 10556
    assert data.x.shape == (2708, 1433) and data.num_classes == 7
    assert split_sizes(data) == [140, 500, 1000]
    assert per_class(data.train_mask, data.y, 7) == [20] * 7
    assert data.name == "cora"
    assert_clean(data)


def test_cora_pyg_layout_and_folder_path(tmp_path):
    raw = tmp_path / "Cora" / "raw"
    shutil.copytree(BUNDLE, raw)
    bundled = load("cora", root=str(tmp_path / "elsewhere"))
    assert_same(
        load("cora", root=str(tmp_path)), bundled
    )  # through PyG's Planetoid class
    assert_same(load(str(raw)), bundled)  # a folder path, detected


def test_planetoid_missing_files(tmp_path):
    with pytest.raises(
        UserError, match=r"citeseer: missing raw files .*CiteSeer/raw.*github"
    ):
        load("citeseer", root=str(tmp_path))
    folder = tmp_path / "partial"
    shutil.copytree(BUNDLE, folder)
    os.chmod(folder / "ind.cora.allx", 0o644)
    os.remove(folder / "ind.cora.allx")
    with pytest.raises(UserError, match=r"lacks ind\.cora\.allx"):
        load(str(folder))


# ---------------------------------------------------------------- Shchur npz


# Coauthor CS (18,333 x 6,805 features) runs the same reader and split: its counts are checked by
# benchmarks/real_datasets.py with the other large real files
@pytest.mark.parametrize(
    "name, rel, nodes, edges, classes",
    [
        ("amazon-photo", "amazon_photo/amazon_photo.npz", 7650, 238162, 8),
    ],
)
def test_shchur_counts_and_split(name, rel, nodes, edges, classes):
    shared(rel)
    data = load(name, root=SHARED)
    assert (data.num_nodes, data.edge_index.size(1), data.num_classes) == (
        nodes,
        edges,
        classes,
    )
    assert per_class(data.train_mask, data.y, classes) == [20] * classes
    assert per_class(data.val_mask, data.y, classes) == [30] * classes
    assert split_sizes(data)[2] == nodes - 50 * classes
    assert not bool(
        (data.train_mask & data.val_mask).any()
        or (data.val_mask & data.test_mask).any()
    )
    assert_clean(data)


def test_shchur_split_seeded():
    path = shared("amazon_photo/amazon_photo.npz")
    data = load(path)
    assert torch.equal(load(path).train_mask, data.train_mask)
    assert not torch.equal(load(path, seed=1).train_mask, data.train_mask)


def test_shchur_pyg_layout(tmp_path):
    src = shared("amazon_photo/amazon_photo.npz")
    raw = tmp_path / "Photo" / "raw"
    raw.mkdir(parents=True)
    os.symlink(src, raw / "amazon_electronics_photo.npz")
    assert_same(load("amazon-photo", root=str(tmp_path)), load(src))


def test_shchur_original_keys(tmp_path):
    adj = sp.csr_matrix(
        np.array([[0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 1, 0], [1, 0, 0, 0]])
    )
    attr = sp.csr_matrix(np.eye(4, 3, dtype=np.float32))
    path = tmp_path / "tiny.npz"
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=adj.shape, attr_data=attr.data, attr_indices=attr.indices,
             attr_indptr=attr.indptr, attr_shape=attr.shape, labels=np.array([0, 1, 0, 1]))  # fmt: skip
    data = load(str(path))
    assert data.edge_index.tolist() == [
        [0, 0, 1, 1, 2, 3],
        [1, 3, 0, 2, 1, 0],
    ]  # loop dropped
    assert data.x.shape == (4, 3) and data.name == "tiny"
    assert_clean(data)


def test_one_based_labels_shifted():
    data = load(
        "blogcatalog",
        root=os.path.dirname(os.path.dirname(shared("blogcatalog/blogcatalog.npz"))),
    )
    assert data.num_classes == 6 and int(data.y.min()) == 0 and int(data.y.max()) == 5


def test_shchur_missing_file(tmp_path):
    with pytest.raises(
        UserError, match=r"amazon-computers: no file at .*amazon_electronics_computers"
    ):
        load("amazon-computers", root=str(tmp_path))


# ---------------------------------------------------------------- heterophily npz


def test_heterophily_texas_split0():
    data = load(shared("texas/texas.npz"))
    assert (
        data.num_nodes == 183
        and data.edge_index.size(1) == 2 * 279
        and data.num_classes == 5
    )
    assert split_sizes(data) == [87, 59, 37]
    assert_clean(data)
    assert_same(load("texas", root=SHARED), data)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            {"edges": np.array([[0, 1], [1, 9]])},
            r"edge ids out of range: .*\[0, 9\].*6 nodes",
        ),
        ({"node_features": np.full((6, 3), np.nan, dtype=np.float32)}, "NaN or Inf"),
        ({"node_labels": np.array([0, 1, 0, -3, 0, 1])}, "labels out of range"),
        ({"node_labels": np.array([0, 1, 0])}, "shape mismatch"),
        ({"edges": np.array([0, 1, 2])}, r"edges must have shape \[E, 2\]"),
    ],
    ids=["edge-range", "nan", "label-range", "label-shape", "edge-shape"],
)
def test_heterophily_bad_input(tmp_path, override, message):
    path = write_heterophily(tmp_path / "bad.npz", **override)
    with pytest.raises(UserError, match=message):
        load(path)


def test_corrupt_npz(tmp_path):
    path = write_heterophily(tmp_path / "ok.npz")
    with open(path, "rb") as f:
        blob = f.read()
    bad = tmp_path / "corrupt.npz"
    bad.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(UserError):
        load(str(bad), format="heterophily")


# ---------------------------------------------------------------- edge lists


def test_snap_jlg_shared():
    data = load(shared("snap_email_enron/email-enron.jlg"))
    assert data.num_nodes == 36692 and data.edge_index.size(1) == 2 * 183831
    assert (
        data.has_labels is False
        and data.num_classes == 1
        and data.x.shape == (36692, 2)
    )
    assert_clean(data)


def test_jlg_cleaned(tmp_path):
    path = tmp_path / "g.jlg"
    with gzip.open(path, "wt") as f:
        f.write("4,5,d,tiny\n1,2\n2,1\n2,2\n3,4\n1,2\n")
    data = load(str(path))
    assert data.num_nodes == 4
    assert data.edge_index.tolist() == [[0, 1, 2, 3], [1, 0, 3, 2]]


def test_jlg_bad(tmp_path):
    path = tmp_path / "g.jlg"
    with gzip.open(path, "wt") as f:
        f.write("3,2,u,tiny\n1,2\n2,7\n")
    with pytest.raises(UserError, match="edge ids out of range"):
        load(str(path))
    with gzip.open(path, "wt") as f:
        f.write("3,3,u,tiny\n1,2\n2,3\n")
    with pytest.raises(UserError, match="header says 3 edges but the file has 2"):
        load(str(path))


def test_text_edge_lists(tmp_path):
    (tmp_path / "a.txt").write_text("# comment\n0 1\n1\t2\n2 2\n")
    (tmp_path / "b.csv").write_text("id_1,id_2\n0,1\n1,2\n")
    with gzip.open(tmp_path / "c.txt.gz", "wt") as f:
        f.write("0 1\n1 2\n")
    expect = [[0, 1, 1, 2], [1, 0, 2, 1]]
    for name in ("a.txt", "b.csv", "c.txt.gz"):
        assert load(str(tmp_path / name)).edge_index.tolist() == expect, name
    (tmp_path / "sparse.txt").write_text("1000 5000000\n5000000 77\n")
    data = load(str(tmp_path / "sparse.txt"))
    assert data.num_nodes == 3 and data.node_ids.tolist() == [77, 1000, 5000000]


# ---------------------------------------------------------------- OGB


def test_write_ogb_round_trip(tmp_path):
    data = synthetic(400, avg_degree=6, num_features=5, seed=4)
    folder = write_ogb(data, str(tmp_path), "ogbn-synthetic")
    assert os.path.isfile(os.path.join(folder, "raw", "edge.csv.gz"))
    back = load(folder)
    assert_same(back, data)
    assert back.num_classes == data.num_classes and back.name == "ogbn-synthetic"
    assert_same(load(folder), data)  # second time from OGB's processed file


def test_ogb_registered_name(tmp_path):
    data = synthetic(600, avg_degree=6, num_features=4, seed=5)
    folder = write_ogb(data, str(tmp_path), "ogbn-arxiv")
    year = np.zeros((600, 1), dtype=np.int64)  # arxiv's extra node file, OGB reads it
    with gzip.open(os.path.join(folder, "raw", "node_year.csv.gz"), "wt") as f:
        np.savetxt(f, year, fmt="%d")
    back = load("ogbn-arxiv", root=str(tmp_path))
    assert_same(back, data)
    assert back.num_classes == 40  # OGB's master table for ogbn-arxiv


def test_ogb_missing(tmp_path):
    with pytest.raises(
        UserError,
        match=r"ogbn-products: missing .*ogbn_products.*PygNodePropPredDataset",
    ):
        load("ogbn-products", root=str(tmp_path))


# ---------------------------------------------------------------- saved Data


def test_torch_file(tmp_path):
    data = synthetic(200, seed=2)
    torch.save(data, tmp_path / "g.pt")
    assert_same(load(str(tmp_path / "g.pt")), data)
    torch.save(
        {"x": data.x, "y": data.y, "edge_index": data.edge_index}, tmp_path / "d.pt"
    )
    back = load(str(tmp_path / "d.pt"))
    assert torch.equal(back.edge_index, data.edge_index) and back.name == "d"


# ---------------------------------------------------------------- synthetic


def test_synthetic_deterministic_clean_skewed():
    a = synthetic(3000, avg_degree=12, seed=1)
    assert_same(a, synthetic(3000, avg_degree=12, seed=1))
    c = synthetic(3000, avg_degree=12, seed=2)
    assert a.edge_index.shape != c.edge_index.shape or not torch.equal(
        a.edge_index, c.edge_index
    )
    assert_clean(a)
    deg = a.edge_index[0].bincount(minlength=a.num_nodes).float()
    assert 0.8 * 12 < deg.mean() <= 12
    assert deg.max() > 5 * deg.median()  # heavy tail
    assert (
        a.y[a.edge_index[0]] == a.y[a.edge_index[1]]
    ).float().mean() > 0.5  # planted classes
    centroid_gap = (a.x[a.y == 0].mean(0) - a.x[a.y == 1].mean(0)).norm()
    assert centroid_gap > 3  # class-correlated features
    assert per_class(a.train_mask, a.y, 8) == [20] * 8


def test_synthetic_names():
    data = load("synthetic-2k")
    assert data.num_nodes == 2000 and data.name == "synthetic-2k"
    assert load("synthetic-2k-d8").edge_index.size(1) <= 2000 * 8
    assert synthetic(2, num_classes=8).num_nodes == 2


# ---------------------------------------------------------------- split and validate


def test_per_class_split_small_and_unlabelled():
    y = torch.tensor([0] * 30 + [1] * 100 + [-1] * 5)
    train, val, test = per_class_split(y, 2, seed=3)
    assert per_class(train, y.clamp(min=0), 2) == [20, 20]
    assert per_class(val, y.clamp(min=0), 2) == [10, 30]
    assert not bool((train | val | test)[y < 0].any())
    assert torch.equal(per_class_split(y, 2, seed=3)[0], train)


def test_validate_rejects():
    data = synthetic(50, seed=0)
    bad = data.clone()
    bad.y = data.y.clone()
    bad.y[0] = data.num_classes
    with pytest.raises(UserError, match="labels out of range"):
        validate(bad)
    bad = data.clone()
    bad.edge_index = torch.tensor([[0], [50]])
    with pytest.raises(UserError, match="edge ids out of range"):
        validate(bad)
    bad = data.clone()
    bad.x = data.x.clone()
    bad.x[3, 1] = float("inf")
    with pytest.raises(UserError, match="NaN or Inf in 1 node rows"):
        validate(bad)
    bad = data.clone()
    bad.train_mask = data.train_mask[:10]
    with pytest.raises(UserError, match=r"train_mask must be bool \[50\]"):
        validate(bad)


def test_ogb_proteins_multilabel(tmp_path):
    folder = tmp_path / "ogbn_proteins"
    raw, split = folder / "raw", folder / "split" / "species"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    n, edges = 5, np.array([[0, 1], [1, 2], [3, 4], [2, 2]])
    feats = np.arange(4 * 8, dtype=np.float64).reshape(4, 8) / 10
    labels = (np.arange(n * 112).reshape(n, 112) % 3 == 0).astype(np.int64)

    def put(path, array, fmt="%d"):
        with gzip.open(path, "wt") as f:
            np.savetxt(f, np.atleast_2d(array), fmt=fmt, delimiter=",")

    put(raw / "edge.csv.gz", edges)
    put(raw / "edge-feat.csv.gz", feats, fmt="%.3f")
    put(raw / "node-label.csv.gz", labels)
    put(raw / "node_species.csv.gz", np.zeros((n, 1)))
    put(raw / "num-node-list.csv.gz", [[n]])
    put(raw / "num-edge-list.csv.gz", [[len(edges)]])
    for part, ids in (("train", [0, 1]), ("valid", [2]), ("test", [3, 4])):
        put(split / f"{part}.csv.gz", np.array(ids)[:, None])
    (folder / "RELEASE_v1.txt").write_text("test\n")
    data = load("ogbn-proteins", root=str(tmp_path))
    assert data.multilabel is True and data.num_classes == 112
    assert data.y.shape == (n, 112) and data.y.dtype == torch.int64
    assert data.x.shape == (n, 8)
    assert torch.allclose(
        data.x[4], torch.tensor(feats[2], dtype=torch.float32)
    )  # mean of edge 3-4
    assert data.edge_index.tolist() == [[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]]
    assert split_sizes(data) == [2, 1, 2]


def write_musae(folder, prefix, target, edges=((0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)),
                edge_columns=("id_1", "id_2"), features_name=None, n=6):
    """A MUSAE set in its own file names: PREFIX_edges.csv, PREFIX_target.csv (``target``: column -> values),
    PREFIX_features.json (or ``features_name``) with node k holding feature ids k and k + 1."""
    import json

    import pandas as pd

    os.makedirs(folder, exist_ok=True)
    pd.DataFrame(list(edges), columns=list(edge_columns)).to_csv(os.path.join(folder, f"{prefix}_edges.csv"),
                                                                 index=False)
    pd.DataFrame(target).to_csv(os.path.join(folder, f"{prefix}_target.csv"), index=False)
    with open(os.path.join(folder, features_name or f"{prefix}_features.json"), "w") as f:
        json.dump({str(k): [k, k + 1] for k in range(n)}, f)
    return str(folder)


def test_musae_sets_by_their_own_file_names(tmp_path):
    """Twitch (node ids in new_id, label mature), GitHub (ml_target), Wikipedia (traffic quintiles), an unknown
    set (its 'target'), the MUSAE repository's layout (P.json); a folder of two sets wants one set's edges file."""
    new_id = [3, 0, 5, 1, 4, 2]  # Twitch's rows are not in node order; its id column is the Twitch user id
    mature = [True, False, True, True, False, False]
    twitch = load(write_musae(tmp_path / "twitch" / "DE", "musae_DE", {
        "id": [9100 + k for k in range(6)], "days": [7] * 6, "mature": mature, "views": [5] * 6,
        "partner": [False] * 6, "new_id": new_id}, edge_columns=("from", "to")))
    want = torch.zeros(6, dtype=torch.int64)
    want[new_id] = torch.tensor(mature, dtype=torch.int64)
    assert twitch.name == "DE" and twitch.num_classes == 2 and twitch.class_names == ["False", "True"]
    assert torch.equal(twitch.y, want)
    assert twitch.x.shape == (6, 7) and twitch.x[2].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert twitch.edge_index.size(1) == 12
    assert_clean(twitch)
    git = load(write_musae(tmp_path / "git_web_ml", "musae_git", {
        "id": range(6), "name": list("abcdef"), "ml_target": [0, 1, 1, 0, 1, 0]}))
    assert git.y.tolist() == [0, 1, 1, 0, 1, 0] and git.num_classes == 2
    wiki = load(write_musae(tmp_path / "chameleon", "musae_chameleon", {"id": range(6),
                                                                        "target": [50, 10, 900, 7, 3000, 120]}))
    assert wiki.num_classes == 5 and wiki.y.tolist() == [2, 1, 4, 0, 4, 3]  # cut at 10, 50, 120, 900: quantiles
    other = load(write_musae(tmp_path / "lastfm", "lastfm_asia", {"id": range(6), "target": [5, 17, 5, 0, 17, 0]},
                             edge_columns=("node_1", "node_2")))
    assert other.y.tolist() == [1, 2, 1, 0, 2, 0] and other.class_names == ["0", "5", "17"]
    repo = load(write_musae(tmp_path / "input", "facebook", {"id": range(6), "page_type": list("ttgcpp")},
                            features_name="facebook.json"))
    assert repo.y.tolist() == [3, 3, 1, 0, 2, 2]
    both = write_musae(tmp_path / "two", "musae_git", {"id": range(6), "ml_target": [0, 1] * 3})
    write_musae(both, "musae_ES", {"id": range(6), "mature": [0, 1] * 3})
    with pytest.raises(UserError, match=r"2 MUSAE sets \(ES, git\); give one set's _edges.csv"):
        load(both)
    assert load(os.path.join(both, "musae_ES_edges.csv")).y.tolist() == [0, 1] * 3
    write_musae(tmp_path / "bad", "musae_x", {"id": range(6), "score": range(6)})
    with pytest.raises(UserError, match="no label column: it has id, score"):
        load(str(tmp_path / "bad"))


def test_ogb_never_writes_into_a_folder_outside_the_data_root(tmp_path, monkeypatch):
    """A shared dataset folder (here read through --root and as a path) stays as it was: OGB's processed/
    goes to a shadow in the data root, made once and reused."""
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "ours"))
    shared = tmp_path / "shared"
    data = synthetic(600, avg_degree=6, num_features=4, seed=5)
    folder = write_ogb(data, str(shared), "ogbn-arxiv")
    with gzip.open(os.path.join(folder, "raw", "node_year.csv.gz"), "wt") as f:
        np.savetxt(f, np.zeros((600, 1), dtype=np.int64), fmt="%d")
    custom = write_ogb(data, str(shared), "ogbn-mine")

    def snapshot():
        return {(p.relative_to(shared), p.stat().st_mtime_ns) for p in shared.rglob("*")}

    before = snapshot()
    for _ in range(2):  # processed, then read from the shadow
        assert_same(load("ogbn-arxiv", root=str(shared)), data)
        assert_same(load(custom), data)
    assert snapshot() == before
    made = sorted(p.relative_to(tmp_path / "ours") for p in (tmp_path / "ours").rglob("geometric_data_processed.pt"))
    assert len(made) == 2 and all(str(p).startswith("ogb") for p in made)
    # a folder inside the data root is processed in place
    inside = write_ogb(data, str(tmp_path / "ours"), "ogbn-inside")
    assert_same(load(inside), data)
    assert os.path.isfile(os.path.join(inside, "processed", "geometric_data_processed.pt"))


def test_a_folder_stands_for_the_one_graph_file_in_it(tmp_path):
    """``gnndist run <folder>`` of a folder holding one ``.jlg`` (or ``.npz``); two graphs there: one line naming
    both."""

    def jlg(path, n, edges):
        path.write_text(f"{n},{len(edges)},u,g\n" + "".join(f"{a},{b}\n" for a, b in edges))

    one = tmp_path / "one"
    one.mkdir()
    jlg(one / "graph.jlg", 5, [(1, 2), (2, 3), (4, 5)])
    (one / "graph-ids.csv").write_text("0,1\n1,2\n")  # an edge list beside it loses to the .jlg
    assert load(str(one)).num_nodes == load(str(one / "graph.jlg")).num_nodes == 5
    jlg(one / "other.jlg", 4, [(1, 2)])
    with pytest.raises(UserError, match=r"holds 2 graphs: pass one of graph.jlg, other.jlg"):
        load(str(one))


def test_the_data_root_is_found_without_importing_the_loaders():
    """A cached partition's key needs only the data root: torch_geometric (~5 s of start-up) stays unimported."""
    import subprocess
    import sys

    code = ("import sys; from gnndist.datasets import default_root; default_root(); "
            "assert 'torch_geometric' not in sys.modules, 'imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    from gnndist.datasets import synthetic, validate  # the functions, though their modules are imported by now

    assert callable(synthetic) and callable(validate)
