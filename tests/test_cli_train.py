"""``gnndist train`` / ``gnndist run`` end to end: JSON summary, logs, torchrun, errors, resume."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.partition import partition

from gnndist.cli import main
from gnndist.training.trainer import Trainer

GNNDIST = [sys.executable, "-m", "gnndist.cli"]


def _run(args, env=None, timeout=240):
    e = {**os.environ, **(env or {})}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if env is None or var not in env:
            e.pop(var, None)
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=e)


def test_wrong_world_size_is_one_line(part2, capsys):
    assert main(["train", str(part2), "--ranks", "3", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has 2 parts but --ranks is 3" in err[0]


def test_world_size_mismatch_under_torchrun_env(part2, monkeypatch, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # what torchrun sets: this process is its one rank
    assert main(["train", str(part2), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "has 2 parts but the world has 1 ranks" in err and "Traceback" not in err


def test_peer_that_never_joins_times_out(part2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    t0 = time.monotonic()
    r = _run(GNNDIST + ["train", str(part2), "--epochs", "1", "--timeout", "2"], env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "peer never joined" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 90


def test_missing_and_corrupt_part(part2, tmp_path, capsys, pooled_ranks):
    broken = tmp_path / "broken"
    shutil.copytree(part2, broken)
    (broken / "part-1" / "x.npy").unlink()
    assert main(["train", str(broken), "--ranks", "2", "--epochs", "1", "--no-progress"]) == 2
    assert main(["train", str(tmp_path / "nothing"), "--epochs", "1"]) == 2
    assert "not a gnndist partition directory" in capsys.readouterr().err


def test_checkpoint_resume_continues_exactly(tmp_path, capsys):
    d = tmp_path / "p1"
    partition(synthetic(200, avg_degree=5, num_classes=3, num_features=6, seed=2), 1).save(d, dataset="toy")
    base = ["train", str(d), "--json", "--no-progress", "--checkpoint", str(tmp_path / "ck")]
    assert main(base[:2] + ["--epochs", "6", "--json", "--no-progress"]) == 0
    straight = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(base + ["--epochs", "3"]) == 0
    capsys.readouterr()
    assert (tmp_path / "ck" / "ckpt-000002.pt").is_file() and (tmp_path / "ck" / "best.pt").is_file()
    assert main(base + ["--epochs", "6", "--resume"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["final_loss"] == straight["final_loss"]
    assert resumed["test_acc"] == straight["test_acc"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--layers", "0"], "--layers must be >= 1"),
        (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
        (["--model", "transformer"], "unknown --model"),
        (["--resume"], "--resume needs --checkpoint"),
    ],
    ids=["layers", "dropout", "model", "resume"],
)
def test_bad_training_flags(part2, argv, message, capsys):
    assert main(["train", str(part2), "--epochs", "1", "--no-progress"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_ogb_evaluator_matches_counts(tmp_path):
    from gnndist.partition import load as load_part

    from gnndist.config import TrainConfig
    from gnndist.graph import DistGraph

    d = tmp_path / "p1"
    partition(synthetic(200, avg_degree=5, num_classes=3, num_features=6, seed=4), 1).save(d, dataset="toy")
    arrays, meta = load_part(d, 0)
    cfg = TrainConfig()
    cfg.run.progress = False
    plain = Trainer(DistGraph(arrays, meta), cfg)
    ogb = Trainer(DistGraph(arrays, {**meta, "dataset": "ogbn-arxiv"}), cfg)
    assert plain.metric == ogb.metric == "acc"  # OGB's metric for ogbn-arxiv, computed by gnndist.tasks.metrics
    ogb.model.load_state_dict(plain.model.state_dict())
    assert ogb.evaluate() == pytest.approx(plain.evaluate(), abs=1e-12)


def test_run_on_ogb_layout(tmp_path, monkeypatch, capsys, pooled_ranks):
    from gnndist.datasets import write_ogb

    data = synthetic(300, avg_degree=5, num_classes=4, num_features=6, seed=5)
    write_ogb(data, str(tmp_path), "ogbn-arxiv")
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "cache"))
    assert main(["run", "ogbn-arxiv", "--root", str(tmp_path), "--ranks", "2", "--epochs", "3",
                 "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["metric"] == "acc" and summary["dataset"] == "ogbn-arxiv"
    assert 0.0 <= summary["test_acc"] <= 1.0


def test_feature_normalisation_only_for_nonnegative_features(tmp_path):
    import torch
    from gnndist.datasets import load
    from gnndist.partition import load as load_part

    from gnndist.graph import DistGraph

    for name, data in (("signed", synthetic(100, avg_degree=4, num_classes=2, num_features=5, seed=0)),
                       ("cora", load("cora"))):
        partition(data, 1).save(tmp_path / name, dataset=name)
        arrays, meta = load_part(tmp_path / name, 0)
        x = torch.from_numpy(arrays["x"]).clone()
        graph = DistGraph(arrays, meta, normalize_features=True)  # a load transform (gnndist train: the default)
        assert graph.features_normalized
        if name == "signed":
            assert torch.equal(graph.x, x)
        else:
            sums = graph.x.sum(1)
            assert torch.allclose(sums[x.sum(1) > 0], torch.ones(1))


def test_split_seed_reaches_the_loader_and_the_cache_key(tmp_path, capsys):
    from gnndist.testing import shared_data

    root = shared_data()
    if not os.path.exists(os.path.join(root, "amazon_photo")):
        pytest.skip("shared Amazon Photo not present")
    masks = []
    for split in (0, 1):
        out = tmp_path / f"s{split}"
        assert main(["partition", "amazon-photo", "--root", root, "--parts", "2", "--split-seed", str(split),
                     "--method", "metis", "--balance", "nodes", "--out", str(out), "--json"]) == 0  # any partition
        capsys.readouterr()
        masks.append(sorted(load_part_orig_train(out)))
    assert masks[0] != masks[1] and len(masks[0]) == len(masks[1]) == 160
    from gnndist.config import DataConfig, PartitionConfig
    from gnndist.parts.cache import partition_dir

    keys = {partition_dir("amazon-photo", PartitionConfig(parts=2), DataConfig(split_seed=s)).name for s in (0, 1)}
    assert len(keys) == 2


def load_part_orig_train(out):
    from gnndist.partition import load as load_part

    ids = []
    for rank in range(2):
        arrays, _ = load_part(out, rank)
        n = len(arrays["train_mask"])
        ids += arrays["orig_id"][:n][arrays["train_mask"]].tolist()
    return ids


def test_model_preset_fills_only_flags_not_given():
    from gnndist.cli import build_parser
    from gnndist.presets import from_args as train_config_from_args

    def cfg(*argv):
        return train_config_from_args(build_parser().parse_args(["train", "DIR", *argv]))

    plain = cfg()
    assert (plain.model.model, plain.model.hidden, plain.optim.lr) == ("gcn", 16, 0.01)
    gat = cfg("--model", "gat")
    assert (gat.model.hidden, gat.model.dropout, gat.optim.lr) == (64, 0.6, 0.005)
    mine = cfg("--model", "gat", "--hidden", "32", "--lr", "0.02", "--no-progress")
    assert (mine.model.hidden, mine.model.dropout, mine.optim.lr, mine.run.progress) == (32, 0.6, 0.02, False)


def test_dataset_family_recipe_sits_below_presets_and_flags():
    from gnndist.cli import build_parser
    from gnndist.presets import dataset_recipe
    from gnndist.presets import from_args as train_config_from_args

    def cfg(dataset, *argv):
        return train_config_from_args(build_parser().parse_args(["train", "DIR", *argv]), dataset)

    photo = cfg("../shared/data/amazon_photo/amazon_photo.npz")
    assert (photo.model.hidden, photo.model.normalize_features, photo.optim.lr) == (64, False, 0.01)
    assert cfg("amazon-photo", "--hidden", "8", "--normalize-features").model.hidden == 8
    assert cfg("amazon-photo", "--normalize-features").model.normalize_features is True
    assert cfg("amazon-photo", "--model", "gat").model.dropout == 0.6  # the model's preset still applies
    cora = cfg("cora")
    assert (cora.model.hidden, cora.model.normalize_features) == (16, True)
    assert dataset_recipe("coauthor-cs") is None and dataset_recipe(None) is None


def test_edge_features_of_an_ogb_layout_graph_train_exactly(tmp_path, monkeypatch, capsys, pooled_ranks):
    """ogbn-proteins' shape: multi-label tasks, edge features; --model gine reads them on every rank."""
    from gnndist.datasets import load, write_ogb

    data = synthetic(240, avg_degree=6, num_classes=2, num_features=5, seed=6)
    g = torch.Generator().manual_seed(6)
    data.y = (torch.rand(data.num_nodes, 3, generator=g) < 0.4).long()  # [N, 3] binary tasks
    data.edge_attr = torch.rand(data.edge_index.shape[1], 4, generator=g)  # [E, 4]
    folder = write_ogb(data, str(tmp_path), "ogbn-edgy")
    back = load(folder)
    assert back.edge_attr.shape == (data.edge_index.shape[1], 4)
    assert torch.equal(back.edge_attr, data.edge_attr)
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "cache"))
    losses = {}
    for p in (1, 2):
        assert main(["run", folder, "--ranks", str(p), "--model", "gine", "--epochs", "3", "--hidden", "8",
                     "--json", "--no-progress"]) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["metric"] == "rocauc"
        losses[p] = summary["final_loss"]
    assert losses[2] == pytest.approx(losses[1], rel=1e-5)
    assert main(["run", "cora", "--ranks", "1", "--model", "gine", "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "reads edge features" in err and "Traceback" not in err


def test_python_m_gnndist_is_the_cli(tmp_path):
    """``python -m gnndist`` (from a folder outside the checkout) runs the same command line as the script."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gnndist", "info", str(tmp_path / "missing")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
