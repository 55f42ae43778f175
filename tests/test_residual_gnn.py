"""--arch residual (Platonov et al. 2023): P = 3 ranks equal one process (outputs, every gradient, per-epoch
losses with dropout); the heterophily recipe is chosen for its family only, and flags override it."""

import copy

import pytest
import torch

from gnndist.config import ModelConfig, TrainConfig
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.nn import build_model
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import Trainer

MODELS = ["gcn", "sage", "gat", "gin"]
EPOCHS = 2


def _cfg(model: str) -> TrainConfig:
    cfg = TrainConfig()
    cfg.model.model, cfg.model.arch, cfg.model.layers, cfg.model.hidden = model, "residual", 2, 16
    cfg.model.dropout, cfg.model.norm, cfg.model.normalize_features = 0.2, "layer", False
    cfg.optim.epochs, cfg.optim.lr, cfg.optim.weight_decay = EPOCHS, 0.01, 0.0
    cfg.run.progress = False
    return cfg


def _factory(cfg: TrainConfig):
    m = cfg.model
    return lambda f_in, f_out: build_model(m.model, f_in, m.hidden, f_out, m.layers, m.dropout, m.norm, arch=m.arch)


def _rank_job(grid, partdir):
    """Every model: per-epoch losses (dropout on), then one step's logits and gradients (dropout on, same step)."""
    out = {}
    for model in MODELS:
        cfg = _cfg(model)
        graph = DistGraph.load(partdir, grid)
        trainer = Trainer(graph, cfg, model=_factory(cfg))
        init = copy.deepcopy(trainer.model.state_dict())
        trainer.fit()
        losses = [row["loss"] for row in trainer.history]

        graph = DistGraph.load(partdir, grid)
        trainer = Trainer(graph, cfg, model=_factory(cfg))
        trainer.model.train()
        with graph.context.step(seed=1, epoch=2):
            logits = trainer.model(graph, graph.x)  # [n_owned, classes]
            trainer.task.objective(logits).backward()
        trainer.allreduce_grads()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
        out[model] = dict(losses=losses, init=init, logits=logits.detach(), grads=grads,
                          ids=graph.orig_id[: graph.n_owned])
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric
    from gnndist.partition import partition

    data = synthetic(90, avg_degree=5, num_classes=3, num_features=7, seed=3)
    data.train_mask[:] = False
    data.train_mask[::2] = True
    results = {}
    for world in (1, 3):
        d = tmp_path_factory.mktemp(f"p{world}")
        partition(data, world, **QUICK_PARTITION).save(d, dataset="toy")
        results[world] = run_distributed(_rank_job, world, str(d))
    return results


@pytest.mark.parametrize("model", MODELS)
def test_residual_three_ranks_equal_one(runs, model):
    one, three = runs[1][0][model], [r[model] for r in runs[3]]
    for name, w in one["init"].items():  # the same weights: rank 0's, broadcast
        assert_close(f"{model} init {name}", w, three[0]["init"][name], rtol=0.0)
    ids = torch.cat([r["ids"] for r in three])
    logits = torch.cat([r["logits"] for r in three])[torch.argsort(ids)]
    assert_close(f"{model} logits", one["logits"][torch.argsort(one["ids"])], logits)
    for name, g in one["grads"].items():
        for rank, r in enumerate(three):
            assert_close(f"{model} grad {name} (rank {rank})", g, r["grads"][name])
    assert len(one["losses"]) == EPOCHS
    for epoch, (a, b) in enumerate(zip(one["losses"], three[0]["losses"])):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), f"{model} epoch {epoch}: loss {b} at P=3, {a} at P=1"


def test_residual_model_has_the_papers_layers():
    m = build_model("sage", 7, 16, 1, 3, 0.2, "layer", arch="residual")
    names = {n.split(".")[0] for n, _ in m.named_parameters()}
    assert names == {"lin_in", "norms", "convs", "lins", "norm_out", "lin_out"}
    assert len(m.convs) == len(m.lins) == len(m.norms) == 3
    assert isinstance(m.norm_out, torch.nn.LayerNorm)


def test_residual_refuses_what_it_cannot_build():
    with pytest.raises(UserError, match="--arch residual is for --model gat, gcn, gin, sage"):
        build_model("gcn2", 7, 16, 2, 2, 0.2, "none", arch="residual")
    with pytest.raises(UserError, match="--hidden 12 must be a multiple of its 8 heads"):
        build_model("gat", 7, 12, 2, 2, 0.2, "layer", arch="residual")
    with pytest.raises(UserError, match="--arch must be plain or residual"):
        ModelConfig(arch="deep")


FAMILY = ["roman-empire", "amazon-ratings", "minesweeper", "tolokers", "questions", "roman_empire",
          "../shared/data/minesweeper/minesweeper.npz"]


@pytest.mark.parametrize("dataset", FAMILY)
def test_heterophily_recipe_is_chosen_for_its_family(dataset):
    from gnndist.presets import compose, dataset_recipe

    assert "Platonov" in dataset_recipe(dataset)[0]
    for model in ("gcn", "sage", "gat"):  # the model's own preset (gat: hidden 64, dropout 0.6) does not apply
        cfg = compose({"model": {"model": model}}, dataset)
        m, o = cfg.model, cfg.optim
        assert (m.arch, m.layers, m.hidden, m.dropout, m.norm, m.normalize_features) == (
            "residual", 5, 512, 0.2, "layer", False)
        assert (o.lr, o.weight_decay, o.epochs, cfg.eval.splits, cfg.eval.metric) == (3e-5, 0.0, 1000, "all", "auto")


@pytest.mark.parametrize("dataset", ["cora", "amazon-photo", "chameleon", "squirrel-filtered", "minesweeper2", None])
def test_heterophily_recipe_is_not_chosen_for_others(dataset):
    from gnndist.presets import compose

    cfg = compose({"model": {"model": "gcn"}}, dataset)
    assert (cfg.model.arch, cfg.optim.lr, cfg.eval.splits) == ("plain", 0.01, "one")


def test_flags_override_the_heterophily_recipe():
    from gnndist.cli import build_parser
    from gnndist.presets import from_args

    def cfg(*argv):
        return from_args(build_parser().parse_args(["train", "DIR", *argv]), "minesweeper")

    mine = cfg("--hidden", "64", "--layers", "2", "--lr", "0.001", "--epochs", "50", "--arch", "plain")
    assert (mine.model.hidden, mine.model.layers, mine.optim.lr, mine.optim.epochs, mine.model.arch) == (
        64, 2, 0.001, 50, "plain")
    assert mine.model.dropout == 0.2 and mine.eval.splits == "all"  # the rest of the recipe stays
    one = cfg("--split", "3")  # one shipped split instead of the recipe's --splits all
    assert (one.eval.split, one.eval.splits) == (3, "one")
    plain_gat = cfg("--model", "gat", "--arch", "plain")  # back to the model's own architecture and preset
    assert (plain_gat.model.hidden, plain_gat.model.dropout) == (64, 0.6)


def test_residual_recompute_gives_the_same_gradients(tmp_path):
    """--recompute with --arch residual: every block recomputed in backward (dropout on), the same gradients."""
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    from gnndist.dist.grid import ProcessGrid

    data = synthetic(60, avg_degree=4, num_classes=2, num_features=5, seed=1)
    partition(data, 1).save(tmp_path, dataset="toy")
    graph = DistGraph.load(tmp_path, ProcessGrid())
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = build_model("sage", 5, 8, 1, 2, 0.3, "layer", recompute=recompute, arch="residual")
        with graph.context.step(seed=0, epoch=1):
            model(graph, graph.x).square().sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        assert_close(f"grad {name}", g, grads[1][name])


def test_the_trainer_builds_the_residual_model_of_the_config(part1):
    """``--arch residual`` reaches the model the trainer (and so ``gnndist train``) builds."""
    from gnndist.dist.grid import ProcessGrid
    from gnndist.nn.models.residual_gnn import ResidualGNN

    cfg = TrainConfig()
    cfg.model.arch, cfg.model.norm, cfg.optim.epochs, cfg.run.progress = "residual", "layer", 1, False
    trainer = Trainer(DistGraph.load(part1, ProcessGrid()), cfg)
    assert isinstance(trainer.model, ResidualGNN)
    assert not isinstance(Trainer(DistGraph.load(part1, ProcessGrid()), TrainConfig()).model, ResidualGNN)  # plain
