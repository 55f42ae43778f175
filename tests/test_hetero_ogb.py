"""ogbn-mag in OGB's raw layout (issue 34): a tiny copy written here, file by file as OGB lays it out, loads
through the normal dataset path (the folder, or ``ogbn-mag`` under a root) into the union graph; a run on it
reports OGB's Evaluator's accuracy on the target type."""

import gzip
import os

import numpy as np
import pandas as pd
import pytest
import torch

from gnndist.config import TrainConfig
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION, run_distributed
from gnndist.training.trainer import Trainer

TYPES = ["author", "field_of_study", "institution", "paper"]  # the order of OGB's num-node-dict header
RELATIONS = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
             ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study")]  # edge_reltype 0..3


def _csv(path, rows, header=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pd.DataFrame(rows, columns=header).to_csv(path, header=header is not None, index=False, compression="gzip")


def write_tiny_mag(root, papers=90, seed=0):
    """``<root>/ogbn_mag`` in OGB's layout of ogbn-mag (``RELEASE_v2.txt``, ``raw/``, ``split/time/``); returns the
    folder and what it holds (counts, edges per relation, paper features, labels, split ids)."""
    rng = np.random.default_rng(seed)
    n = {"author": 2 * papers, "field_of_study": 7, "institution": 5, "paper": papers}
    folder = os.path.join(root, "ogbn_mag")
    raw = os.path.join(folder, "raw")
    _csv(os.path.join(raw, "num-node-dict.csv.gz"), [[n[t] for t in TYPES]], header=TYPES)
    _csv(os.path.join(raw, "triplet-type-list.csv.gz"), [list(r) for r in RELATIONS])
    edges = {}
    for k, (s, r, d) in enumerate(RELATIONS):
        e = 3 * n[s] if r != "affiliated_with" else n[s]
        ei = np.stack([rng.integers(0, n[s], e), rng.integers(0, n[d], e)], axis=1)  # [E, 2] (src, dst)
        edges[s, r, d] = ei
        rel = os.path.join(raw, "relations", f"{s}___{r}___{d}")
        _csv(os.path.join(rel, "edge.csv.gz"), ei)
        _csv(os.path.join(rel, "num-edge-list.csv.gz"), [[e]])
        _csv(os.path.join(rel, "edge_reltype.csv.gz"), np.full((e, 1), k))
    y = rng.integers(0, 6, papers)
    x = (rng.normal(0, 1, (papers, 5)) + y[:, None]).astype(np.float32)
    _csv(os.path.join(raw, "node-feat", "paper", "node-feat.csv.gz"), x)
    _csv(os.path.join(raw, "node-feat", "paper", "node_year.csv.gz"), rng.integers(2010, 2020, (papers, 1)))
    _csv(os.path.join(raw, "nodetype-has-label.csv.gz"), [[t == "paper" for t in TYPES]], header=TYPES)
    _csv(os.path.join(raw, "node-label", "paper", "node-label.csv.gz"), y[:, None])
    split = os.path.join(folder, "split", "time")
    _csv(os.path.join(split, "nodetype-has-split.csv.gz"), [[t == "paper" for t in TYPES]], header=TYPES)
    perm = rng.permutation(papers)
    ids = {"train": np.sort(perm[: papers // 2]), "valid": np.sort(perm[papers // 2 : 3 * papers // 4]),
           "test": np.sort(perm[3 * papers // 4 :])}
    for part, sel in ids.items():
        _csv(os.path.join(split, "paper", f"{part}.csv.gz"), sel[:, None])
    with open(os.path.join(folder, "RELEASE_v2.txt"), "w") as f:
        f.write("ogbn-mag v2, a tiny copy written by tests/test_hetero_ogb.py\n")
    return folder, dict(n=n, edges=edges, x=x, y=y, split=ids)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "data"))  # OGB's processed copy (the folder is not ours)
    return write_tiny_mag(str(tmp_path / "ogb"))


@pytest.mark.parametrize("how", ["folder", "name"])
def test_ogb_mag_layout_loads(tiny, how):
    from gnndist.datasets import load

    folder, want = tiny
    data = load(folder) if how == "folder" else load("ogbn-mag", root=os.path.dirname(folder))
    h = data.hetero
    assert data.name == "ogbn-mag" and h.target == "paper" and data.num_classes == 349  # OGB's master table
    assert h.node_types == TYPES and [int(v) for v in np.diff(h.offsets)] == [want["n"][t] for t in TYPES]
    assert h.featured == [t == "paper" for t in TYPES]
    assert h.relations == RELATIONS + [("institution", "rev_affiliated_with", "author"),
                                       ("paper", "rev_writes", "author"),
                                       ("field_of_study", "rev_has_topic", "paper")]
    off = {t: int(h.offsets[i]) for i, t in enumerate(TYPES)}
    for k, (s, r, d) in enumerate(h.relations):
        got = set(zip((h.rel_src[h.rel_type == k]).tolist(), (h.rel_dst[h.rel_type == k]).tolist()))
        base = (d, r[4:], s) if r.startswith("rev_") else (s, r, d)
        ei = want["edges"][base]
        pairs = {(int(a) + off[base[0]], int(b) + off[base[2]]) for a, b in ei}
        if r.startswith("rev_"):
            pairs = {(b, a) for a, b in pairs}
        if s == d:  # cites: made symmetric in place
            pairs |= {(b, a) for a, b in pairs}
        assert got == pairs, (s, r, d)
    p0, p1 = off["paper"], off["paper"] + want["n"]["paper"]
    assert torch.equal(data.x[p0:p1], torch.from_numpy(want["x"]))
    assert bool((data.x[:p0] == 0).all())  # featureless types: zero rows (learned embeddings in the models)
    assert torch.equal(data.y[p0:p1], torch.from_numpy(want["y"])) and bool((data.y[:p0] == -1).all())
    for mask, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        assert torch.equal(getattr(data, mask).nonzero().view(-1), torch.from_numpy(want["split"][part] + p0))


def test_ogb_mag_target_must_be_labelled(tiny):
    from gnndist.datasets import load

    from gnndist.errors import UserError

    folder, _ = tiny
    with pytest.raises(UserError, match="--target 'author' has no labels in ogbn-mag"):
        load(folder, target="author")


def _rank_eval(grid, partdir):
    cfg = TrainConfig()
    cfg.model.model, cfg.model.hidden, cfg.optim.epochs, cfg.run.progress = "rgcn", 8, 5, False
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, cfg)
    trainer.fit()
    with torch.no_grad():
        trainer.model.eval()
        logits = trainer.model(graph, graph.x)
    return dict(values=trainer.evaluate(), metric=trainer.metric, ids=graph.orig_id[: graph.n_owned].clone(),
                pred=logits.argmax(dim=1))


@pytest.mark.parametrize("world", [1, 2])
def test_ogb_mag_accuracy_is_ogb_evaluators(tiny, tmp_path, world):
    """The run's metric for ogbn-mag is OGB's (acc), and its value is Evaluator('ogbn-mag')'s on the paper rows."""
    from gnndist.datasets import load
    from gnndist.partition import partition
    from ogb.nodeproppred import Evaluator

    folder, want = tiny
    data = load(folder)
    d = tmp_path / f"p{world}"
    partition(data, world, progress=False, **QUICK_PARTITION).save(d, dataset=data.name, progress=False)
    ranks = run_distributed(_rank_eval, world, str(d))
    pred = torch.zeros(data.num_nodes, dtype=torch.long)
    for r in ranks:
        pred[r["ids"]] = r["pred"]
    p0 = int(data.hetero.offsets[TYPES.index("paper")])
    for split, part in (("train", "train"), ("val", "valid"), ("test", "test")):
        rows = torch.from_numpy(want["split"][part]) + p0  # the target type's rows of the split
        ref = Evaluator("ogbn-mag").eval({"y_true": data.y[rows].view(-1, 1), "y_pred": pred[rows].view(-1, 1)})["acc"]
        for r in ranks:
            assert r["metric"] == "acc"
            assert r["values"][f"{split}_acc"] == pytest.approx(ref, abs=1e-12), split


def test_tiny_copy_is_gzip_csv(tiny):
    """The files are what OGB reads: gzipped CSV, the type-dict files with a header row."""
    folder, _ = tiny
    with gzip.open(os.path.join(folder, "raw", "num-node-dict.csv.gz"), "rt") as f:
        assert f.readline().strip() == ",".join(TYPES)
