"""Link prediction as a user runs it: partition with an edge split, train on 2 ranks, predict scores of given pairs
and the encoder's rows, export to PyG; the exported twin with its decoder gives the written scores."""

import importlib
import json

import numpy as np
import pytest
import torch

from gnndist.cli import main

# what the ranks compute is under test here, not how they start: the suite's pooled ranks (conftest.pooled_ranks)
pytestmark = pytest.mark.usefixtures("pooled_ranks")


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


@pytest.mark.parametrize("decoder,embedding", [("dot", "zero"), ("mlp", "learn")], ids=["dot", "mlp-learned-rows"])
def test_train_predict_export_on_two_ranks(graph_file, tmp_path, capsys, decoder, embedding):
    """Train, predict and export on two ranks; the exported PyG twin gives the same rows and scores. With
    ``--embedding learn`` a learned row of --hidden sits beside each node's features, in the twin as well."""
    part, ck = tmp_path / "part", tmp_path / "ck"
    assert main(["partition", str(graph_file), "--parts", "2", "--edge-split", "80,10,10", "--out", str(part),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["train", str(part), "--ranks", "2", "--epochs", "3", "--decoder", decoder, "--hidden", "8",
                 "--embedding", embedding, "--checkpoint", str(ck), "--no-progress", "--json"]) == 0
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
    assert f["task"] == "link" and f["decoder"]["kind"] == decoder
    assert (f["embedding"] is None) == (embedding == "zero") and f["embedding_beside"] == (embedding == "learn")
    model = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    model.eval()
    data = load(str(graph_file))
    _, message = random_edge_split(data.edge_index, data.num_nodes, (0.8, 0.1, 0.1), seed=0)
    x = data.x / data.x.sum(dim=1, keepdim=True) if f["normalize_features"] else data.x
    if f["embedding_beside"]:
        assert f["embedding"].shape == (150, 8)
        x = torch.cat([x, f["embedding"]], 1)  # [N, 6 + 8]
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


def test_predict_over_training_and_validation_edges(graph_file, tmp_path, capsys):
    """``predict --use-valedges-as-input``: the encoder over training + validation edges (OGB collab's test-time
    input), the same on 2 ranks as on 1 and as the PyG twin on that graph; refused in one line where it cannot be."""
    from gnndist.datasets import load
    from gnndist.datasets.edge_split import random_edge_split

    ck, pairs = tmp_path / "ck", tmp_path / "pairs.npy"
    for p in (1, 2):
        assert main(["partition", str(graph_file), "--parts", str(p), "--edge-split", "80,10,10",
                     "--use-valedges-as-input", "--out", str(tmp_path / f"p{p}")]) == 0
    assert main(["train", str(tmp_path / "p2"), "--ranks", "2", "--epochs", "3", "--hidden", "8", "--checkpoint",
                 str(ck), "--no-progress"]) == 0
    np.save(pairs, np.array([[0, 1], [5, 140], [3, 3], [149, 0], [7, 20]]))

    def predict(p: int, what: str, *flags: str) -> np.ndarray:
        out = tmp_path / f"{what}-p{p}{'-v' if flags else ''}.npy"
        extra = ["--pairs", str(pairs)] if what == "scores" else []
        assert main(["predict", str(tmp_path / f"p{p}"), "--ranks", str(p), "--checkpoint", str(ck), "--what", what,
                     *extra, "--out", str(out), "--no-progress", *flags]) == 0
        return np.load(out)

    rows2, rows1 = (predict(p, "embedding", "--use-valedges-as-input") for p in (2, 1))
    np.testing.assert_allclose(rows2, rows1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predict(2, "scores", "--use-valedges-as-input"),
                               predict(1, "scores", "--use-valedges-as-input"), rtol=1e-5, atol=1e-7)
    assert not np.allclose(rows2, predict(2, "embedding"))  # the training graph's rows differ

    # the PyG twin on the training + validation edges
    assert main(["export", "--checkpoint", str(ck), "--format", "pyg", "--out", str(tmp_path / "pyg.pt")]) == 0
    f = torch.load(tmp_path / "pyg.pt", weights_only=False)
    model = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    model.load_state_dict(f["state_dict"])
    model.eval()
    data = load(str(graph_file))
    split, message = random_edge_split(data.edge_index, data.num_nodes, (0.8, 0.1, 0.1), seed=0)
    both = torch.cat([message, split.valid.T, split.valid.flip(1).T], dim=1)  # [2, 2 (E_train + E_val)]
    x = data.x / data.x.sum(dim=1, keepdim=True) if f["normalize_features"] else data.x
    if f["embedding_beside"]:
        assert f["embedding"].shape == (150, 8)
        x = torch.cat([x, f["embedding"]], 1)  # [N, 6 + 8]
    with torch.no_grad():
        np.testing.assert_allclose(rows2, model(x, both).numpy(), rtol=1e-4, atol=1e-5)

    capsys.readouterr()
    assert main(["predict", str(tmp_path / "p1"), "--checkpoint", str(ck), "--what", "embedding", "--out",
                 str(tmp_path / "x.npy"), "--use-valedges-as-input", "--no-progress"]) == 0  # p1 has it: fine
    plain = tmp_path / "plain"
    assert main(["partition", str(graph_file), "--parts", "1", "--edge-split", "80,10,10", "--out", str(plain)]) == 0
    capsys.readouterr()
    assert main(["predict", str(plain), "--checkpoint", str(ck), "--what", "embedding", "--out",
                 str(tmp_path / "y.npy"), "--use-valedges-as-input", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stores no message graph" in err[0] and not (tmp_path / "y.npy").exists()
