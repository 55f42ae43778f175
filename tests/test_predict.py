"""``gnndist predict``: the trained model on every node, in the dataset's order, equal for every P and to PyG."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gnndist.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Cora partitioned into 1, 2 and 4 parts (plain METIS: any partition serves, and --method auto's search of
    every backend and balance takes seconds)."""
    from gnndist.datasets import load
    from gnndist.partition import partition

    d = tmp_path_factory.mktemp("predict")
    data = load("cora")
    for p in (1, 2, 4):
        partition(data, p, method="metis", balance="nodes", progress=False).save(d / f"p{p}", dataset="cora",
                                                                               progress=False)
    return d, data


def _run(capsys, *argv) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out.strip().splitlines(), cap.err.strip().splitlines()


def _pyg_gcn(data, state: dict):
    """Cora's GCN on one process with torch_geometric layers and the trained weights: logits, layer 0's output."""
    import torch_geometric.nn as pyg_nn

    convs = torch.nn.ModuleList([pyg_nn.GCNConv(data.x.shape[1], 16), pyg_nn.GCNConv(16, 7)])
    convs.load_state_dict({k.removeprefix("convs."): v for k, v in state.items()})
    x = data.x / data.x.sum(1, keepdim=True).clamp(min=1e-12)  # the load transform of --normalize-features
    with torch.no_grad():
        h = convs[0](x, data.edge_index)
        return convs[1](torch.relu(h), data.edge_index), h


def test_predictions_equal_for_every_p_and_a_pyg_model_in_dataset_order(trained, tmp_path, capsys, pooled_ranks):
    d, data = trained
    ck = tmp_path / "ck"
    code, out, _ = _run(capsys, "train", str(d / "p1"), "--epochs", "3", "--no-progress", "--checkpoint", str(ck),
                        "--json")
    assert code == 0
    run = json.loads(out[-1])
    files = {}
    for p, layout in ((1, "1d"), (2, "1d"), (4, "2d")):  # trained on 1 rank: any number of parts serves
        files[p] = tmp_path / f"logits{p}.npy"
        code, out, err = _run(capsys, "predict", str(d / f"p{p}"), "--checkpoint", str(ck), "--out", str(files[p]),
                              "--what", "logits", "--ranks", str(p), "--strategy", layout, "--json", "--no-progress")
        assert code == 0, err
        summary = json.loads(out[-1])
        for split in ("train", "val", "test"):  # the metric recomputed from the written rows: the run's (best.pt)
            assert summary[f"{split}_acc"] == run[f"{split}_acc"], (p, split)
    got1, got2, got4 = (torch.from_numpy(np.load(files[p])) for p in (1, 2, 4))
    assert got1.shape == (data.num_nodes, 7)
    torch.testing.assert_close(got2, got1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got4, got1, rtol=1e-5, atol=1e-6)
    state = torch.load(ck / "best.pt", weights_only=True)["model"]
    logits, layer0 = _pyg_gcn(data, state)
    torch.testing.assert_close(got1, logits, rtol=1e-4, atol=1e-5)  # row i is dataset node i

    emb = tmp_path / "emb.npy"  # the representation after layer 0, on 2 ranks: PyG's first conv
    assert _run(capsys, "predict", str(d / "p2"), "--checkpoint", str(ck), "--out", str(emb), "--what",
                "embedding", "--layer", "0", "--ranks", "2", "--no-progress")[0] == 0
    torch.testing.assert_close(torch.from_numpy(np.load(emb)), layer0, rtol=1e-4, atol=1e-5)
    cls = tmp_path / "class.csv"
    assert _run(capsys, "predict", str(d / "p1"), "--checkpoint", str(ck), "--out", str(cls), "--what", "class",
                "--no-progress")[0] == 0
    rows = np.loadtxt(cls, delimiter=",", skiprows=1, dtype=np.int64)  # node,v0
    assert np.array_equal(rows[:, 0], np.arange(data.num_nodes))
    assert np.array_equal(rows[:, 1], got1.argmax(1).numpy())


@pytest.fixture(scope="module")
def small_ck(trained, tmp_path_factory):
    """A checkpoint of Cora's GCN (1 epoch) and one of a model of another feature width (a synthetic graph)."""
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    d, _ = trained
    root = tmp_path_factory.mktemp("ck")
    assert main(["train", str(d / "p1"), "--epochs", "1", "--no-progress", "--checkpoint", str(root / "cora")]) == 0
    partition(synthetic(60, avg_degree=4, num_classes=3, num_features=5, seed=0), 1,
              progress=False).save(root / "toy", dataset="toy", progress=False)
    assert main(["train", str(root / "toy"), "--epochs", "1", "--no-progress",
                 "--checkpoint", str(root / "other")]) == 0
    (root / "corrupt.pt").write_bytes((root / "cora" / "best.pt").read_bytes()[:100])
    return root


@pytest.mark.parametrize("case", ["exists", "layer-beyond", "layer-without-embedding", "corrupt", "other-model",
                                  "missing", "suffix", "unwritable", "a-folder", "valedges-of-a-node-model"])
def test_bad_predict_input_is_one_line_and_writes_nothing(trained, small_ck, tmp_path, capsys, case):
    d, _ = trained
    out = tmp_path / "out.npy"
    ck, extra, words = str(small_ck / "cora"), [], ""
    if case == "exists":
        out.write_bytes(b"keep me")
        words = "exists: pass --force"
    elif case == "layer-beyond":
        extra, words = ["--what", "embedding", "--layer", "5"], "--layer 5 is out of range: the model has 2 layers"
    elif case == "layer-without-embedding":
        extra, words = ["--layer", "0"], "--layer K goes with --what embedding"
    elif case == "corrupt":
        ck, words = str(small_ck / "corrupt.pt"), "not a readable checkpoint"
    elif case == "other-model":
        ck, words = str(small_ck / "other"), "holds a different model"
    elif case == "missing":
        ck, words = str(small_ck / "nothing"), "no checkpoint at"
    elif case == "suffix":
        out, words = tmp_path / "out.parquet", "the file's suffix says the format"
    elif case == "unwritable":  # the tests run as root: a folder that is a regular file is what cannot be written
        (tmp_path / "afile").write_bytes(b"")
        out, words = tmp_path / "afile" / "out.npy", "afile is not a writable folder"
    elif case == "valedges-of-a-node-model":
        extra, words = ["--use-valedges-as-input"], "the checkpoint is a node model"
    elif case == "a-folder":  # with --force too: a folder is never replaced
        (tmp_path / "out.npy").mkdir()
        extra, words = ["--force"], "out.npy is a folder: give the file to write"
    code, _, err = _run(capsys, "predict", str(d / "p1"), "--checkpoint", ck, "--out", str(out), "--no-progress",
                        *extra)
    assert code == 2 and len(err) == 1 and err[0].startswith("gnndist: error:") and words in err[0], err
    if case == "a-folder":
        assert out.is_dir() and not list(out.iterdir())
    else:
        assert (out.read_bytes() == b"keep me") if case == "exists" else not out.exists()
    assert not list(tmp_path.glob(".*tmp*")), "no temporary file is left"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """An 80-node graph with 3 edge features, one part (every model: GINE reads the edge features)."""
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    data = synthetic(80, avg_degree=5, num_classes=3, num_features=6, seed=4)
    data.edge_attr = torch.rand(data.edge_index.shape[1], 3, generator=torch.Generator().manual_seed(4))  # [E, 3]
    d = tmp_path_factory.mktemp("toy")
    partition(data, 1, progress=False).save(d / "p", dataset="toy", progress=False)
    return d / "p", data


class AdapterNet(torch.nn.Module):
    """A custom model of PyGAdapter layers (PyG's SAGEConv, GraphConv) with a DistBatchNorm between them."""

    def __init__(self, i: int, h: int, o: int, layers: int, dropout: float, norm: str):
        import torch_geometric.nn as pyg_nn

        from gnndist.nn import DistBatchNorm, PyGAdapter

        super().__init__()
        self.convs = torch.nn.ModuleList([PyGAdapter(pyg_nn.SAGEConv(i, h)), PyGAdapter(pyg_nn.GraphConv(h, o))])
        self.norm = DistBatchNorm(h)

    def forward(self, graph, x):
        return self.convs[1](graph, torch.relu(self.norm(self.convs[0](graph, x), graph)))


class AdapterNetPyG(torch.nn.Module):
    """AdapterNet on one device, with the PyG layers in place of the adapters: what the export's state dict fits."""

    def __init__(self, i: int, h: int, o: int):
        import torch_geometric.nn as pyg_nn

        super().__init__()
        self.convs = torch.nn.ModuleList([pyg_nn.SAGEConv(i, h), pyg_nn.GraphConv(h, o)])
        self.norm = torch.nn.BatchNorm1d(h)

    def forward(self, x, edge_index):
        return self.convs[1](torch.relu(self.norm(self.convs[0](x, edge_index))), edge_index)


@pytest.mark.parametrize("model,flags", [("gcn", ["--norm", "batch"]), ("sage", ["--norm", "layer", "--no-bias"]),
                                         ("gin", []),
                                         ("gat", ["--hidden", "16", "--norm", "batch"]),
                                         ("gcn2", ["--layers", "3", "--hidden", "8"]), ("gine", ["--hidden", "8"]),
                                         ("adapters", ["--hidden", "8"])])
def test_exported_pyg_model_gives_the_logits_of_gnndist(toy, tmp_path, capsys, model, flags):
    """``gnndist export --format pyg``: the PyG twin built from the file alone reproduces predict's logits (1e-5)."""
    import importlib

    from gnndist.nn.models import MODELS, register_model

    part, data = toy
    ck, logits, out = tmp_path / "ck", tmp_path / "logits.npy", tmp_path / "pyg.pt"
    if model == "adapters":
        register_model("test-adapters", AdapterNet)
    try:
        assert main(["train", str(part), "--model", "test-adapters" if model == "adapters" else model, "--epochs",
                     "2", "--no-progress", "--checkpoint", str(ck), "--no-normalize-features", *flags]) == 0
        assert main(["predict", str(part), "--checkpoint", str(ck), "--out", str(logits), "--what", "logits",
                     "--no-progress"]) == 0
        assert main(["export", "--checkpoint", str(ck), "--out", str(out), "--format", "pyg"]) == 0
    finally:
        MODELS.pop("test-adapters", None)
    f = torch.load(out, weights_only=True)
    if model == "adapters":  # no twin class: each wrapped conv's own state dict, and the whole model's unwrapped
        assert f["model"] is None and sorted(f["layers"]) == ["convs.0", "convs.1"]
        assert f["layers"]["convs.0"]["class"].endswith(".SAGEConv")
        import torch_geometric.nn as pyg_nn

        pyg_nn.SAGEConv(6, 8).load_state_dict(f["layers"]["convs.0"]["state_dict"])  # strict
        twin = AdapterNetPyG(6, 8, 3)
    else:
        assert f["module"] == ("torch_geometric.nn.models" if model in ("gcn", "sage", "gin") else "gnndist.pyg_twins")
        twin = getattr(importlib.import_module(f["module"]), f["model"])(**f["kwargs"])
    twin.load_state_dict(f["state_dict"])  # strict: every name and shape
    twin.eval()
    with torch.no_grad():
        got = twin(data.x, data.edge_index, data.edge_attr) if model == "gine" else twin(data.x, data.edge_index)
    torch.testing.assert_close(got, torch.from_numpy(np.load(logits)), rtol=1e-5, atol=1e-5)
    if model == "gcn":
        capsys.readouterr()
        assert main(["export", "--checkpoint", str(ck), "--out", str(out), "--format", "pyg"]) == 2  # exists
        assert "pass --force" in capsys.readouterr().err


@pytest.mark.parametrize("flags,words", [(["--arch", "residual"],
                                          "(GCNConv) is a gnndist layer with no torch_geometric twin"),
                                         (["--model", "gin", "--norm", "batch"], "PyG's GIN puts --norm batch inside")])
def test_export_without_a_pyg_twin_is_one_line(toy, tmp_path, capsys, flags, words):
    """No exact PyG twin: a model with a gnndist layer of its own (``--arch residual``'s blocks), GIN with a norm."""
    part, _ = toy
    assert main(["train", str(part), "--layers", "2", "--hidden", "8", "--epochs", "1", "--no-progress",
                 "--checkpoint", str(tmp_path / "ck"), *flags]) == 0
    capsys.readouterr()
    out = tmp_path / "m.pt"
    assert main(["export", "--checkpoint", str(tmp_path / "ck"), "--out", str(out), "--format", "pyg"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnndist: error:") and words in err[0] and not out.exists(), err
    if "--arch" not in flags:
        return
    (tmp_path / "afile").write_bytes(b"")  # an unwritable --out (as root: its folder is a regular file)
    assert main(["export", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "afile" / "m.pt")]) == 2
    assert "afile is not a writable folder" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(tmp_path / "ck"), "--out", str(out)]) == 0  # the plain format: any model
    f = torch.load(out, weights_only=True)
    assert f["config"]["model"]["arch"] == "residual"
    assert (f["in_channels"], f["out_channels"], f["edge_dim"]) == (6, 3, 3)


def test_every_model_gives_each_layer_representation(part1):
    """forward_at(K) for every built-in model (the layers its spec declares: convs or blocks) and a model
    registered with its own representation layers."""
    from torch import nn

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.inference.predict import forward_at
    from gnndist.nn import GCNConv, build_model
    from gnndist.nn.models import MODELS, register_model

    graph = DistGraph.load(part1, ProcessGrid())
    for name, spec in sorted(MODELS.items()):
        if spec.edge_features or spec.hetero:  # typed-graph models: tests/test_hetero.py
            continue
        model = build_model(name, graph.x.shape[1], 8, 3, 2, 0.5)
        layers = spec.layers(model)
        assert len(layers) == 2, name
        for k in range(2):
            h = forward_at(model, graph, k, layers)
            assert h.shape[0] == graph.n_owned and torch.isfinite(h.float()).all(), (name, k)
        assert torch.equal(forward_at(model, graph, None), forward_at(model, graph, None)), name  # eval: no dropout

    class Custom(nn.Module):
        def __init__(self, in_channels, hidden, out_channels, layers, dropout, norm):
            super().__init__()
            self.first, self.second = GCNConv(in_channels, hidden), GCNConv(hidden, out_channels)

        def forward(self, graph, x):
            return self.second(graph, torch.relu(self.first(graph, x)))

    spec = register_model("test-custom", Custom, representation=lambda m: [m.first, m.second])
    try:
        m = build_model("test-custom", graph.x.shape[1], 5, 3, 2, 0.0)
    finally:
        MODELS.pop("test-custom")
    with torch.no_grad():
        assert torch.equal(forward_at(m, graph, 0, spec.layers(m)), m.first(graph, graph.x))


def test_a_model_applies_to_another_graph_of_the_same_feature_width(tmp_path, capsys, monkeypatch):
    """Inductive use: weights trained on one graph, predictions for every node of another (same F and classes);
    piped, rank 0 says each stage that took a while in one line (here every stage: the threshold is 0)."""
    import gnndist.partition.progress as stages
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    for name, (n, seed) in {"a": (60, 1), "b": (90, 2)}.items():
        partition(synthetic(n, avg_degree=4, num_classes=3, num_features=5, seed=seed), 1,
                  progress=False).save(tmp_path / name, dataset=name, progress=False)
    assert main(["train", str(tmp_path / "a"), "--epochs", "1", "--no-progress",
                 "--checkpoint", str(tmp_path / "ck")]) == 0
    out = tmp_path / "b.pt"
    monkeypatch.setattr(stages, "MIN_SECONDS", 0.0)
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "b"), "--checkpoint", str(tmp_path / "ck"), "--out", str(out)]) == 0
    said = [line.split(": ", 1)[1].rsplit(" ", 2)[0] for line in capsys.readouterr().err.splitlines()
            if line.startswith("gnndist predict on 1 rank(s): ")]
    assert said == ["read the checkpoint", "read the part", "forward", "layer 1/2", "layer 2/2", "write b.pt",
                    "the metric from the written rows"], said
    probs = torch.load(out, weights_only=True)
    assert probs.shape == (90, 3)
    torch.testing.assert_close(probs.sum(1), torch.ones(90))


def test_predict_gives_the_trainers_own_final_evaluation_logits(part1, tmp_path):
    """The last checkpoint, applied by predict, gives the logits the trainer's final evaluation scored."""
    from gnndist.config import OptimConfig, RunConfig, TrainConfig
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    ck, out = tmp_path / "ck", tmp_path / "logits.npy"
    cfg = TrainConfig(optim=OptimConfig(epochs=2), run=RunConfig(progress=False, checkpoint=str(ck)))
    graph = DistGraph.load(part1, ProcessGrid(), normalize_features=cfg.model.normalize_features)
    trainer = Trainer(graph, cfg)
    trainer.fit()
    trainer.model.eval()
    with torch.no_grad():
        final = trainer.model(graph, graph.x)  # [n_owned, C]: what evaluate() scored after the last step
    expected = torch.zeros(graph.num_nodes, final.shape[1])
    expected[graph.orig_id[: graph.n_owned]] = final  # in the dataset's order
    assert main(["predict", str(part1), "--checkpoint", str(sorted(ck.glob("ckpt-*.pt"))[-1]), "--out", str(out),
                 "--what", "logits", "--no-progress"]) == 0
    torch.testing.assert_close(torch.from_numpy(np.load(out)), expected)
