"""Link prediction as a user runs it: partition with an edge split, train on 2 ranks, predict scores of given pairs
and the encoder's rows, export to PyG; the exported twin with its decoder gives the written scores."""

import importlib
import json

import numpy as np
import pytest
import torch

from gnndist.cli import main


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    n = 150
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (700,), generator=g)
    dst = (src + torch.randint(1, 12, (700,), generator=g)) % n  # a banded graph: links a model can learn
    data = {"x": torch.rand(n, 6, generator=g), "y": torch.arange(n) % 3, "num_classes": 3,
            "edge_index": torch.stack([src, dst]), "train_mask": torch.arange(n) < 50,
            "val_mask": (torch.arange(n) >= 50) & (torch.arange(n) < 100), "test_mask": torch.arange(n) >= 100}
    path = tmp_path_factory.mktemp("g") / "graph.pt"
    torch.save(data, path)
    return path


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_train_predict_export_on_two_ranks(graph_file, tmp_path, capsys, decoder):
    part, ck = tmp_path / "part", tmp_path / "ck"
    assert main(["partition", str(graph_file), "--parts", "2", "--edge-split", "80,10,10", "--out", str(part),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["train", str(part), "--ranks", "2", "--epochs", "3", "--decoder", decoder, "--hidden", "8",
                 "--checkpoint", str(ck), "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"test_auc", "test_ap", "val_auc", "val_ap"} <= set(out) and 0.0 <= out["test_auc"] <= 1.0

    pairs = np.array([[0, 1], [5, 140], [3, 3], [149, 0], [7, 20]])
    np.save(tmp_path / "pairs.npy", pairs)
    assert main(["predict", str(part), "--ranks", "2", "--checkpoint", str(ck), "--what", "scores", "--pairs",
                 str(tmp_path / "pairs.npy"), "--out", str(tmp_path / "s.npy"), "--no-progress"]) == 0
    assert main(["predict", str(part), "--ranks", "2", "--checkpoint", str(ck), "--what", "embedding",
                 "--out", str(tmp_path / "h.npy"), "--no-progress"]) == 0
    assert main(["export", "--checkpoint", str(ck), "--format", "pyg", "--out", str(tmp_path / "pyg.pt")]) == 0
    scores, rows = np.load(tmp_path / "s.npy"), np.load(tmp_path / "h.npy")
    assert scores.shape == (5, 1) and rows.shape == (150, 8)

    # the PyG twin on one process, on the same message graph: the same rows and scores
    from gnndist.datasets import load
    from gnndist.datasets.edge_split import random_edge_split

    f = torch.load(tmp_path / "pyg.pt", weights_only=False)
    assert f["task"] == "link" and f["decoder"]["kind"] == decoder and f["embedding"] is None
    model = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    model.eval()
    data = load(str(graph_file))
    _, message = random_edge_split(data.edge_index, data.num_nodes, (0.8, 0.1, 0.1), seed=0)
    x = data.x / data.x.sum(dim=1, keepdim=True) if f["normalize_features"] else data.x
    with torch.no_grad():
        h = model(x, message)
        hu, hv = h[pairs[:, 0]], h[pairs[:, 1]]
        if decoder == "dot":
            logit = (hu * hv).sum(-1)
        else:  # OGB's LinkPredictor(8, 8, 1, 3, 0.0): its names
            sd, z = f["decoder"]["state_dict"], hu * hv
            for i in range(3):
                z = z @ sd[f"lins.{i}.weight"].T + sd[f"lins.{i}.bias"]
                z = torch.relu(z) if i < 2 else z
            logit = z.view(-1)
    assert np.allclose(rows, h.numpy(), rtol=1e-4, atol=1e-5)
    assert np.allclose(scores[:, 0], torch.sigmoid(logit).numpy(), rtol=1e-4, atol=1e-6)


def test_run_ogbl_collab_layout_on_two_ranks(tmp_path, capsys, monkeypatch):
    """A graph written in OGB's ogbl-collab layout trains by name: OGB's split, the MLP decoder, Hits@50."""
    from gnndist.datasets import synthetic
    from gnndist.datasets.ogbl import write_ogbl

    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path / "data"))
    write_ogbl(synthetic(200, avg_degree=8, num_classes=3, num_features=6, seed=3), str(tmp_path / "root"))
    assert main(["run", "ogbl-collab", "--root", str(tmp_path / "root"), "--ranks", "2", "--epochs", "2",
                 "--hidden", "8", "--layers", "2", "--no-progress", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["metric"] == "hits@50" and {"test_hits@50", "val_hits@50"} <= set(out)
    assert "OGB's full-batch ogbl-collab baseline" in captured.err + captured.out  # its recipe, said
    assert out["model"] == "gcn" and 0.0 <= out["test_hits@50"] <= 1.0
