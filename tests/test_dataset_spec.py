"""The dataset registry: one spec per dataset or family, read by the loader, the downloader, the task, the metric,
the recipe and the help; docs/downloads.md's table checked against it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gnndist.datasets import load, names, register, synthetic
from gnndist.datasets.spec import DATASETS, dataset_spec, loading_spec, source

from gnndist.errors import UserError

CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dataset, name", [
    ("cora", "cora"), ("ogbn-papers100M", "ogbn-papers100m"), ("../shared/data/minesweeper/minesweeper.npz",
                                                                "minesweeper"),
    ("/data/roman_empire.npz", "roman-empire"), ("/data/Photo/raw/amazon_electronics_photo.npz", "amazon-photo"),
    ("/data/amazon_computers/amazon_cs.npz", "amazon-computers"), ("/data/ogbl_collab_pyg", "ogbl-collab"),
    ("synthetic-10k", "synthetic-<N>[k|m|b][-d<deg>]"), ("synthetic-2m-d20", "synthetic-<N>[k|m|b][-d<deg>]"),
    ("synthetic-mag-2k", "synthetic-mag-<N>[k|m]"), ("cora-paper-word", "<dataset>-paper-word"),
], ids=lambda v: v if "/" not in v else v.rsplit("/", 1)[-1])
def test_a_name_or_a_path_finds_its_spec(dataset, name):
    assert dataset_spec(dataset).name == name


@pytest.mark.parametrize("dataset", ["my_graph.npz", "/data/graph", "minesweeper2", "synthetic-x", "", None])
def test_a_users_file_has_no_spec(dataset):
    """A user's file keeps the defaults: a node task, accuracy, no recipe."""
    from gnndist.presets import dataset_recipe, task_of
    from gnndist.tasks.metrics import default_metric

    assert dataset_spec(dataset) is None
    assert task_of({}, dataset) == "node" and dataset_recipe(dataset, "node") is None
    assert default_metric({"dataset": dataset, "classes": 2}) == "acc"
    assert default_metric({"dataset": dataset, "classes": 3, "multilabel": True}) == "rocauc"


def test_every_registered_name_loads_through_its_spec_and_has_a_source():
    registered = [n for n in names() if not n.startswith("synthetic-")]
    assert "tolokers" in registered and "roman-empire" not in registered  # roman-empire: a path's name only
    for n in registered:
        spec = loading_spec(n)
        assert spec is dataset_spec(n) and spec.name == n and spec.loader is not None, n
        assert source(n) is not None and source(n).licence and source(n).citation, n
    assert loading_spec("synthetic-10k").loader is not None and loading_spec("minesweeper.npz") is None


def test_task_metric_and_recipe_are_the_specs():
    from gnndist.presets import RECIPES, dataset_recipe, task_of
    from gnndist.tasks import task_name
    from gnndist.tasks.metrics import default_metric

    for spec in DATASETS.values():  # every recipe a spec names exists
        assert set(spec.recipes.values()) <= set(RECIPES), spec.name
    tasks = [task_of({}, d) for d in ("ogbl-collab", "ogbl-citation2", "cora", "tolokers")]
    assert tasks == ["link", "link", "node", "node"]
    assert task_of({"task": {"task": "node"}}, "ogbl-ddi") == "node" and task_of({}, "cora", "link") == "link"
    with pytest.raises(UserError, match="is a link-prediction dataset"):
        task_name({"dataset": "ogbl-ppa", "link": {}}, "node")
    assert "GAE" in dataset_recipe("cora", "link")[0] and dataset_recipe("cora", "node") is None
    assert "ogbl-collab" in dataset_recipe("ogbl-collab", "link")[0] and dataset_recipe("ogbl-ddi", "link") is None
    assert default_metric({"dataset": "tolokers", "classes": 2}) == "rocauc"
    assert default_metric({"dataset": "questions", "classes": 2}) == "rocauc"  # a path's spec, no loader
    assert default_metric({"dataset": "questions", "classes": 5}) == "acc"  # ROC-AUC needs two classes
    assert default_metric({"dataset": "ogbn-proteins", "classes": 112, "multilabel": True}) == "rocauc"
    assert default_metric({"dataset": "ogbn-arxiv", "classes": 40}) == "acc"
    assert default_metric({"dataset": "tolokers", "classes": 2, "metric": "f1-macro"}) == "f1-macro"


def test_recipe_by_name_replaces_the_datasets_and_flags_override_it():
    from gnndist.config import RunConfig
    from gnndist.presets import RECIPES, compose

    cfg = compose({"run": {"recipe": "refined-gae-collab"}, "model": {"hidden": 64}}, "ogbl-collab", "link")
    assert (cfg.model.model, cfg.model.layers, cfg.model.hidden, cfg.model.norm) == ("propgcn", 4, 64, "layer")
    assert not cfg.model.edge_weights and cfg.optim.clip_grad == 1.0 and cfg.optim.clip_grad_apart
    assert (cfg.task.decoder, cfg.task.decoder_layers, cfg.task.negatives, cfg.task.edge_batch) == ("mlp-res", 5, 3,
                                                                                                     16384)
    assert cfg.optim.lr_decay_every == 100  # their adjustlr, every --interval (100) epochs
    cit = compose({"run": {"recipe": "refined-gae-citation2"}}, "ogbl-citation2", "link")
    assert (cit.model.model, cit.model.layers, cit.model.hidden, cit.model.embedding) == ("propgcn", 3, 256, "learn")
    assert (cit.task.decoder, cit.task.decoder_layers, cit.task.negatives, cit.task.edge_batch) == ("mlp-norm", 5, 3,
                                                                                                     65536)
    assert (cit.optim.lr, cit.optim.epochs, cit.optim.clip_grad_apart) == (3e-4, 200, True)
    assert compose({}, "ogbl-collab", "link").model.edge_weights  # auto: the dataset's own (OGB's baseline)
    bare = compose({"run": {"recipe": "none"}}, "ogbl-collab", "link")
    assert not bare.model.edge_weights and bare.task.decoder == "auto"
    with pytest.raises(UserError, match="unknown --recipe 'x'; known: auto, none, amazon"):
        compose({"run": {"recipe": "x"}}, "cora")
    helped = RunConfig.__dataclass_fields__["recipe"].metadata
    assert all(name in str(helped) for name in RECIPES), helped  # --recipe's help names every recipe


def test_link_data_adds_an_edge_split_only_where_the_dataset_ships_none():
    from gnndist.config import DEFAULT_EDGE_SPLIT, DataConfig, TaskConfig, TrainConfig
    from gnndist.parts.cache import link_data

    link = TrainConfig(task=TaskConfig(task="link"))
    assert link_data(DataConfig(), link, "cora").edge_split == DEFAULT_EDGE_SPLIT
    assert link_data(DataConfig(), link, "/data/ogbl_collab").edge_split is None
    assert link_data(DataConfig(), TrainConfig(), "cora").edge_split is None


def test_the_declared_metrics_are_ogb_evaluators():
    from gnndist.datasets.ogb import OGBN
    from gnndist.datasets.ogbl import OGBL
    from ogb.linkproppred import Evaluator as LinkEvaluator
    from ogb.nodeproppred import Evaluator

    for name in OGBN:
        assert dataset_spec(name).metric == Evaluator(name).eval_metric, name
    for name in OGBL:
        spec = dataset_spec(name)
        assert spec.task == "link" and spec.metric == LinkEvaluator(name).eval_metric, name
    assert dataset_spec("ogbl-ddi").featureless and dataset_spec("ogbn-mag").typed


def _help(capsys, monkeypatch) -> str:
    """``gnndist run --help``, unwrapped."""
    from gnndist.cli import main

    monkeypatch.setenv("COLUMNS", "100000")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    return capsys.readouterr().out


def test_the_help_is_read_from_the_specs(capsys, monkeypatch):
    text = _help(capsys, monkeypatch)
    assert "the datasets' own: hits@100: ogbl-ppa; hits@20: ogbl-ddi; hits@50: ogbl-collab; mrr: ogbl-citation2; " \
        "rocauc: minesweeper, ogbn-proteins, questions, tolokers" in text
    assert "the datasets with their own: ogbl-citation2, ogbl-collab, ogbl-ddi, ogbl-ppa" in text


def test_a_new_dataset_is_one_registration(tmp_path, capsys, monkeypatch):
    """A dataset registered beside its loader loads by name; its task, metric, recipe and help follow its spec."""
    from gnndist.presets import dataset_recipe, task_of
    from gnndist.tasks.metrics import default_metric

    def load_toy(name, root, seed):
        data = synthetic(60, avg_degree=4, num_classes=2, num_features=3, seed=seed)
        data.name = name
        return data

    try:
        register("toy-binary", load_toy, metric="rocauc", recipes={"node": "amazon"}, licence="CC-0",
                 citation="nobody")
        data = load("toy-binary", root=str(tmp_path), seed=1)
        assert data.name == "toy-binary" and torch.equal(data.x, load_toy("x", "", 1).x)
        assert "toy-binary" in names() and "rocauc: minesweeper, ogbn-proteins, questions, tolokers, toy-binary" \
            in _help(capsys, monkeypatch)
        assert default_metric({"dataset": "toy-binary", "classes": 2}) == "rocauc"
        assert task_of({}, "toy-binary") == "node" and "Amazon" in dataset_recipe("toy_binary.npz")[0]
        assert "featureless" not in data  # the spec declares features: none is made up
        register("toy-binary", load_toy, featureless=True, licence="CC-0", citation="nobody")
        assert load("toy-binary", root=str(tmp_path)).featureless  # the spec's declaration reaches the data
    finally:
        DATASETS.pop("toy-binary", None)
    assert dataset_spec("toy-binary") is None


def test_a_lookup_imports_no_heavy_library():
    """A rank asks for its dataset's metric: the loaders' heavy libraries stay unimported."""
    code = ("import sys; from gnndist.datasets.spec import dataset_spec, names; "
            "assert dataset_spec('ogbn-proteins').metric == 'rocauc' and len(names()) > 40; "
            "heavy = [m for m in ('torch_geometric', 'pandas', 'scipy', 'ogb') if m in sys.modules]; "
            "assert not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def _table_rows() -> list[tuple[list[str], str, str]]:
    """docs/downloads.md's Sources table: ``(names, checked by, licence)`` per row."""
    text = (CHECKOUT / "docs" / "downloads.md").read_text()
    section = text.split("## Sources", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[3], cells[4]))
    return rows


def test_the_downloads_table_is_the_specs():
    rows = _table_rows()
    listed = [n.lower() for names_, _, _ in rows for n in names_]
    assert sorted(listed) == sorted(n for n in names() if not n.startswith("synthetic-"))  # each in one row
    for names_, checked, licence in rows:
        sources = [source(n) for n in names_]
        for n, src in zip(names_, sources, strict=True):
            assert src.licence.split(" (")[0].split(";")[0] in licence, n  # "MIT", "CC-0", "no licence file", ...
        hashed = any(f.sha256 for src in sources for f in src.files)
        assert ("sha256" in checked) == hashed, names_
