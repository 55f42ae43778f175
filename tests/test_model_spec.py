"""The model registry: every registered model is a spec, and whatever reads it (the trainer, the presets, the
cost model, the CLI's help) treats a user's ``register_model`` as it treats a built-in model."""

import dataclasses
from functools import partial

import pytest
import torch

from gnndist.config import TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.nn import GNN, GCNConv, build_model
from gnndist.nn.models import MODELS, ModelSpec, models_help, register_model
from gnndist.presets import compose
from gnndist.training.trainer import Trainer


@pytest.fixture
def registered():
    """``register_model`` for one test; the names it added are gone after it."""
    before = set(MODELS)
    yield register_model
    for name in set(MODELS) - before:
        MODELS.pop(name)


def _cfg(model: str, **dist) -> TrainConfig:
    cfg = TrainConfig()
    cfg.model.model, cfg.model.hidden, cfg.optim.epochs, cfg.run.progress = model, 8, 1, False
    for k, v in dist.items():
        setattr(cfg.dist, k, v)
    return cfg


def test_every_model_is_a_frozen_spec_of_its_name():
    for name, spec in MODELS.items():
        assert isinstance(spec, ModelSpec) and spec.name == name
    with pytest.raises(dataclasses.FrozenInstanceError):
        MODELS["gcn"].layouts = ("1d",)
    assert MODELS["rgcn"].layouts == ("1d",) and MODELS["rgcn"].hetero and MODELS["gine"].edge_features
    assert sorted(n for n, s in MODELS.items() if s.cost) == ["gcn", "sage"]  # what the cost model describes
    assert MODELS["gcn2"].param_groups is not None and MODELS["gcn2"].recompute is True


@pytest.mark.parametrize("strategy", ["2d", "auto"])
def test_a_layout_the_model_does_not_run_on_is_one_line_naming_the_flag(registered, part1, strategy):
    registered("test-1d-only", partial(GNN, GCNConv), layouts=("1d",))
    graph = DistGraph.load(part1, ProcessGrid())
    with pytest.raises(UserError) as e:
        Trainer(graph, _cfg("test-1d-only", strategy=strategy))
    assert str(e.value) == f"--model test-1d-only runs on --strategy 1d only, not --strategy {strategy}"
    assert Trainer(graph, _cfg("test-1d-only")).fit().epochs_run == 1  # on 1d it trains


def test_a_user_model_gets_the_spec_handling_of_a_built_in_one(registered, part1):
    """Parameter groups, half precision, recompute, preset, cost-model form and the CLI's help, from the spec."""

    def groups(model, weight_decay):
        first = list(model.convs[0].parameters())
        rest = [p for n, p in model.named_parameters() if not n.startswith("convs.0.")]
        return [{"params": first, "weight_decay": 0.25}, {"params": rest, "weight_decay": weight_decay}]

    registered("test-user", partial(GNN, GCNConv), {"model": {"hidden": 12}}, param_groups=groups, cost="gcn",
               half_precision="its sums are in the rows' dtype")
    graph = DistGraph.load(part1, ProcessGrid())
    cfg = _cfg("test-user", network="ib")
    trainer = Trainer(graph, cfg)
    assert [g["weight_decay"] for g in trainer.optim.param_groups] == [0.25, cfg.optim.weight_decay]
    trainer.fit()
    assert trainer.modelled is not None  # its form in the cost model: the modelled epoch, as gcn's
    cfg.optim.precision = "bf16"
    with pytest.raises(UserError, match=r"^--precision bf16: --model test-user cannot run in half precision: its sums"):
        Trainer(graph, cfg)
    with pytest.raises(UserError, match=r"--recompute is for the deep models \(gcn2, resgcn\)"):
        build_model("test-user", 4, 8, 2, 2, 0.5, recompute=True)
    assert compose({"model": {"model": "test-user"}}).model.hidden == 12  # its preset
    assert "test-user (preset, fp32 only)" in models_help()

    registered("test-plain", partial(GNN, GCNConv))  # declares nothing: one parameter group, not modelled
    trainer = Trainer(graph, _cfg("test-plain", network="ib"))
    assert len(trainer.optim.param_groups) == 1
    trainer.fit()
    assert trainer.modelled is None


def test_a_model_handed_to_the_trainer_declares_nothing(part1):
    graph = DistGraph.load(part1, ProcessGrid())
    trainer = Trainer(graph, _cfg("rgcn", strategy="2d"), model=lambda f_in, f_out: torch.nn.Linear(f_in, f_out))
    assert trainer.spec is None and len(trainer.optim.param_groups) == 1  # --model's spec is not this model's


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_no_bias_builds_every_layer_without_one(name):
    """``--no-bias`` (GAE's encoder): the declaring models' layers hold no bias; a model that does not declare it, or
    ``--arch residual``, is one line."""
    with_bias = {n for n, _ in build_model(name, 6, 8, 3, 2, 0.0, bias=True).named_parameters()}
    without = {n for n, _ in build_model(name, 6, 8, 3, 2, 0.0, bias=False).named_parameters()}
    assert without == {n for n in with_bias if not n.endswith("bias")} and without != with_bias
    with pytest.raises(UserError, match="--no-bias is for --model gcn, sage"):
        build_model("gat", 6, 8, 3, 2, 0.0, bias=False)
    with pytest.raises(UserError, match="--arch residual"):
        build_model(name, 6, 8, 3, 2, 0.0, arch="residual", bias=False)
