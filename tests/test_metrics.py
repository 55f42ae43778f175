"""Evaluation by each benchmark's protocol: exact metrics over ranks, shipped splits, repeated runs.

ROC-AUC is compared with scikit-learn's and OGB's evaluator on the predictions gathered
from every rank, at P = 1 and P = 3; ``--runs 3`` with a hand computation of mean and std;
``--split K`` with the masks in the file.
"""

import json
import statistics

import numpy as np
import pytest
import torch
from gnndist.partition import partition

from gnndist.cli import main
from gnndist.config import TrainConfig
from gnndist.graph import DistGraph
from gnndist.tasks import metrics
from gnndist.testing import QUICK_PARTITION, run_distributed
from gnndist.training.trainer import Trainer

PROTEINS_TASKS = 112  # OGB's evaluator for ogbn-proteins checks the label count


def test_roc_auc_and_f1_match_sklearn_and_ogb():
    from ogb.nodeproppred import Evaluator  # here, not at module level: spawned ranks import this module
    from sklearn.metrics import f1_score, roc_auc_score

    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (500,), generator=g)
    score = torch.randint(0, 20, (500,), generator=g).double()  # many ties: averaged ranks
    assert metrics.roc_auc(y, score) == pytest.approx(roc_auc_score(y.numpy(), score.numpy()), abs=1e-12)
    ym = torch.randint(0, 2, (300, PROTEINS_TASKS), generator=g)
    ym[:, 3] = 1  # one label with positives only: left out of the mean, as OGB does
    sm = torch.randn(300, PROTEINS_TASKS, generator=g)
    ogb = Evaluator("ogbn-proteins").eval({"y_true": ym, "y_pred": sm})["rocauc"]
    assert metrics.roc_auc(ym, sm) == pytest.approx(ogb, abs=1e-12)
    logits = torch.randn(400, 5, generator=g)
    yc = torch.randint(0, 5, (400,), generator=g)
    pred = logits.argmax(1).numpy()
    for name, average in (("f1-micro", "micro"), ("f1-macro", "macro")):
        value = metrics.from_counts(name, metrics.counts(name, logits, yc, 5))
        assert value == pytest.approx(f1_score(yc.numpy(), pred, average=average), abs=1e-12), name


def _binary_data():
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric

    data = synthetic(300, avg_degree=6, num_classes=2, num_features=8, seed=3)
    data.train_mask[:], data.val_mask[:], data.test_mask[:] = False, False, False
    ids = torch.arange(300)
    data.train_mask[ids % 3 == 0], data.val_mask[ids % 3 == 1], data.test_mask[ids % 3 == 2] = True, True, True
    return data


def _multilabel_data():
    data = _binary_data()
    g = torch.Generator().manual_seed(5)
    w = torch.randn(data.x.shape[1], PROTEINS_TASKS, generator=g)
    data.y = (data.x @ w + 0.5 * torch.randn(300, PROTEINS_TASKS, generator=g) > 0).long()  # learnable labels
    data.num_classes = PROTEINS_TASKS
    return data


def _rank_scores(grid, partdirs):
    """Per dataset: this rank's evaluate() after 3 epochs, and its owned ids, scores and masks for the parent."""
    out = {}
    for name, partdir in partdirs.items():
        cfg = TrainConfig()
        cfg.model.hidden, cfg.optim.epochs, cfg.run.progress = 8, 3, False
        graph = DistGraph.load(partdir, grid)
        trainer = Trainer(graph, cfg)
        trainer.fit()
        values = trainer.evaluate()
        with torch.no_grad():
            logits = trainer.model(graph, graph.x)
        out[name] = dict(values=values, metric=trainer.metric, width=logits.shape[1],
                         ids=graph.orig_id[: graph.n_owned], score=metrics.scores(logits, graph.y.dim() > 1),
                         masks=torch.stack([graph.train_mask, graph.val_mask, graph.test_mask]))
    return out


@pytest.mark.parametrize("world", [1, 3], ids=["P1", "P3"])
def test_rocauc_over_ranks_equals_sklearn_and_ogb_on_gathered_predictions(world, tmp_path):
    from ogb.nodeproppred import Evaluator
    from sklearn.metrics import roc_auc_score

    datasets = {"minesweeper": _binary_data(), "ogbn-proteins": _multilabel_data()}
    partdirs = {}
    for name, data in datasets.items():
        partdirs[name] = tmp_path / name
        partition(data, world, progress=False, **QUICK_PARTITION).save(partdirs[name], dataset=name)
    ranks = run_distributed(_rank_scores, world, partdirs)
    for name, data in datasets.items():
        per = [r[name] for r in ranks]
        assert {p["metric"] for p in per} == {"rocauc"}, name  # the dataset's own metric, by default
        assert per[0]["width"] == (1 if name == "minesweeper" else PROTEINS_TASKS)  # binary: one logit
        ids = torch.cat([p["ids"] for p in per])
        score = torch.zeros((300,) + tuple(per[0]["score"].shape[1:]), dtype=per[0]["score"].dtype)
        score[ids] = torch.cat([p["score"] for p in per])
        masks = torch.zeros(3, 300, dtype=torch.bool)
        masks[:, ids] = torch.cat([p["masks"] for p in per], dim=1)
        for i, split in enumerate(("train", "val", "test")):
            assert torch.equal(masks[i], getattr(data, f"{split}_mask"))
            y, s = data.y[masks[i]], score[masks[i]]
            if name == "minesweeper":
                ref = roc_auc_score(y.numpy(), s.numpy())
            else:
                ref = Evaluator("ogbn-proteins").eval({"y_true": y, "y_pred": s})["rocauc"]
            for p in per:  # every rank reports the same, exact value
                assert p["values"][f"{split}_rocauc"] == pytest.approx(ref, abs=1e-12), (name, split)
            assert 0.5 < ref < 1.0 or split != "train", (name, ref)  # trained: better than chance


def _hetero_npz(path, n=120, splits=3, seed=0):
    """A small file in the Platonov et al. layout: masks [splits, N], each row its own 50/25/25 split."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n, size=(4 * n, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    labels = (rng.random(n) < 0.3).astype(np.int64)
    train, val, test = (np.zeros((splits, n), dtype=bool) for _ in range(3))
    for k in range(splits):
        perm = rng.permutation(n)
        train[k, perm[: n // 2]], val[k, perm[n // 2 : 3 * n // 4]], test[k, perm[3 * n // 4 :]] = True, True, True
    np.savez(path, node_features=rng.random((n, 5)).astype(np.float32), node_labels=labels, edges=edges,
             train_masks=train, val_masks=val, test_masks=test)
    return path, (train, val, test)


def test_shipped_split_k_selects_the_masks_of_the_file(tmp_path):
    from gnndist.datasets import load
    from gnndist.partition import load as load_part

    path, masks = _hetero_npz(tmp_path / "minesweeper.npz")
    partition(load(str(path)), 2, progress=False).save(tmp_path / "p2", dataset="minesweeper")
    graphs = []
    for rank in range(2):
        arrays, meta = load_part(tmp_path / "p2", rank)
        graphs.append(DistGraph(arrays, meta))
    assert meta["splits"] == 3 and meta["split_kind"] == "shipped"
    for k in range(3):
        got = np.zeros((3, 120), dtype=bool)
        for graph in (g.with_split(k) for g in graphs):
            ids = graph.orig_id[: graph.n_owned].numpy()
            got[:, ids] = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask]).numpy()
        for i in range(3):
            assert np.array_equal(got[i], masks[i][k]), (k, i)
    cfg = TrainConfig()
    cfg.eval.splits = "all"
    from gnndist.training.runs import plan_runs

    assert plan_runs(cfg, meta) == [(0, 0), (1, 1), (2, 2)]
    cfg.eval.splits, cfg.eval.split, cfg.eval.runs = "one", 2, 2
    assert plan_runs(cfg, meta) == [(0, 2), (1, 2)]


def test_runs_report_each_run_and_mean_std_by_hand(part1, capsys):
    flags = ["train", str(part1), "--epochs", "4", "--no-progress", "--json"]
    assert main(flags + ["--runs", "3", "--seed", "5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    runs = summary["runs"]
    assert [r["seed"] for r in runs] == [5, 6, 7] and [r["run"] for r in runs] == [0, 1, 2]
    for split in ("train", "val", "test"):
        values = [r[f"{split}_acc"] for r in runs]
        assert summary[f"{split}_acc"] == pytest.approx(statistics.mean(values), abs=1e-12)
        assert summary[f"{split}_acc_std"] == pytest.approx(statistics.stdev(values), abs=1e-12)
    assert len({r["test_acc"] for r in runs} | {r["final_loss"] for r in runs}) > 1  # not one run three times
    assert main(flags + ["--seed", "6"]) == 0  # run 1 is exactly the single run of its seed: fresh model and optimiser
    alone = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (alone["test_acc"], alone["final_loss"], alone["best_epoch"]) == \
        (runs[1]["test_acc"], runs[1]["final_loss"], runs[1]["best_epoch"])
    assert main(flags[:-1] + ["--runs", "3", "--seed", "5"]) == 0  # the terminal: each run, then mean ± std
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[-4:-1]] == ["run 0 (seed 5)", "run 1 (seed 6)", "run 2 (seed 7)"]
    mean, std = summary["test_acc"], summary["test_acc_std"]
    assert "3 runs, acc mean ± std" in lines[-1] and f"test {mean:.4f} ± {std:.4f}" in lines[-1]


def test_patience_stops_on_the_validation_metric(part1, capsys):
    assert main(["train", str(part1), "--epochs", "200", "--patience", "3", "--no-progress", "--json"]) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["epochs_run"] == s["best_epoch"] + 4 < 200  # 3 epochs without a better val accuracy, then stop


def test_splits_all_and_random_through_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "cache"))  # the partition cache
    monkeypatch.delenv("GNNDIST_PARTITIONS", raising=False)
    path, _ = _hetero_npz(tmp_path / "minesweeper.npz")
    common = ["--root", str(tmp_path / "root"), "--epochs", "3", "--no-progress", "--json"]
    assert main(["run", str(path), "--splits", "all"] + common) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert s["metric"] == "rocauc" and [r["split"] for r in s["runs"]] == [0, 1, 2] and s["split_kind"] == "shipped"
    assert main(["run", "synthetic-200", "--splits", "random", "--runs", "2", "--split-seed", "4"] + common) == 0
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["split"] for r in s["runs"]] == [0, 1] and s["split_kind"] == "random" and s["metric"] == "acc"
    from gnndist.datasets import load
    from gnndist.datasets.split import per_class_split
    from gnndist.partition import load as load_part

    from gnndist.config import DataConfig, PartitionConfig
    from gnndist.parts.cache import partition_dir

    target = partition_dir("synthetic-200", PartitionConfig(),
                           DataConfig(root=str(tmp_path / "root"), split_seed=4, random_splits=2))
    assert target.parent == tmp_path / "cache" / "partitions"  # not under --root, which holds the generated graph
    assert [p.name for p in (tmp_path / "root").iterdir()] == ["synthetic"]
    arrays, meta = load_part(target, 0)
    data, owned = load("synthetic-200", seed=4), arrays["orig_id"][: len(arrays["train_mask"])]
    for r in range(2):  # random split r is the seeded split of --split-seed + r
        train = per_class_split(data.y, data.num_classes, seed=4 + r)[0]
        assert np.array_equal(arrays["train_masks"][:, r], train[owned])
