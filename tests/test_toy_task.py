"""A third task touches only its own class and its registration: a test-only node regression task ("degree").

The task predicts a per-node value (the node's degree, scaled) with a one-column head and a squared error.
What it stores in a part is one declared component (``target`` [n_owned] float32, META.json's ``degree``).
Nothing in the library names it: the partition writer, a rank's reader (``graph.target``), the trainer,
its checkpoints and ``gnndist predict`` (``--what values``) take it as they take the built-in tasks.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gnndist.partition.components import Component, field

from gnndist.errors import UserError
from gnndist.inference.predict import PredictRequest, predict_rank
from gnndist.tasks.base import TASKS, Task, register_task
from gnndist.tasks.metrics import SPLITS, metric_key
from gnndist.testing import run_distributed


class DegreeTargets(Component):
    """Each owned node's regression target, ``target`` [n_owned] float32 (the dataset's ``data.target``)."""

    name = "degree targets"
    meta_key = "degree"

    def held(self, part):
        return field(part.data, "target") is not None

    def meta(self, part):
        return {"degree": {"scale": 0.1}}

    def writer(self, part, counts):
        target = part.data.target
        return lambda lp: {"target": target[lp.orig_id[: lp.n_owned]].numpy()}

    def disk_bytes(self, part):
        return int(part.csr.num_nodes) * 4

    def memory(self, rank):
        return 4 * rank.rows

    def read(self, t, meta, n_owned, n_halo):
        return {"target": t["target"]} if "target" in t else {}  # [n_owned] float32; no field on other graphs


DEGREE_TARGETS = DegreeTargets()


@register_task
class DegreeTask(Task):
    """Regress every training node's target: mean squared error over the *global* training count."""

    name = "degree"
    noun = "a degree regressor"
    parts = (DEGREE_TARGETS,)
    outputs = ("values", "embedding")

    def __init__(self, graph, cfg):
        self.graph = graph
        self.metric = "closeness"  # 1 / (1 + mse) in (0, 1]: higher is better, as model selection takes it
        self.metrics = (self.metric,)

    def resolved(self, cfg):
        return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, task="degree"))

    def widths(self, hidden):
        return self.graph.x.shape[1], 1

    def wrap(self, encoder, cfg, seed):
        return encoder

    def encoder(self, model):
        return model

    def loss(self, model, epoch, step):
        g = self.graph
        err = model(g, g.x)[:, 0] - g.target
        return err[g.train_mask].square().sum() / g.num_train

    @torch.no_grad()
    def evaluate(self, model, autocast):
        g = self.graph
        with autocast():
            err = (model(g, g.x)[:, 0].float() - g.target).square()
        masks = (g.train_mask, g.val_mask, g.test_mask)
        stats = g.grid.all_reduce_(torch.tensor([[float(err[m].sum()), float(m.sum())] for m in masks],
                                                dtype=torch.float64))
        return {metric_key(s, self.metric): 1.0 / (1.0 + a / max(b, 1.0)) for s, (a, b) in zip(SPLITS, stats.tolist())}

    def predicted(self, model, out, what, pairs=None):
        return out[:, :1] if what == "values" else super().predicted(model, out, what)


def _data():
    from gnndist.datasets import synthetic

    data = synthetic(160, avg_degree=4, num_classes=3, num_features=6, seed=5)
    degree = torch.bincount(data.edge_index[0], minlength=data.num_nodes).float()
    data.target = 0.1 * degree  # [N] float32
    return data


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    from gnndist.partition import partition

    d = tmp_path_factory.mktemp("toy-task")
    data = _data()
    for p in (1, 2):
        partition(data, p, method="random", progress=False).save(d / f"p{p}", dataset="toy-degree", progress=False)
    return d, data


def test_the_toy_task_is_registered_with_its_component():
    from gnndist.partition.components import COMPONENTS

    assert TASKS["degree"] is DegreeTask and DEGREE_TARGETS in COMPONENTS
    assert DegreeTask.stored_in({"degree": {}}) and not DegreeTask.stored_in({})


def test_the_cli_offers_it_as_a_task(capsys):
    """``--task``'s choices and help come from the registry: the toy task is one, with its noun."""
    from gnndist.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["train", "somewhere", "--task", "degree"])
    assert vars(args)["TaskConfig.task"] == "degree"
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "somewhere", "--help"])
    assert "degree: a degree regressor" in " ".join(capsys.readouterr().out.split())


def test_the_partition_writer_and_reader_take_its_component(parts):
    from gnndist.partition import read_meta, read_part

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    d, data = parts
    meta = read_meta(d / "p2")
    assert meta["degree"] == {"scale": 0.1}
    for k in range(2):
        arrays = read_part(d / "p2", k, meta)
        np.testing.assert_array_equal(arrays["target"], data.target.numpy()[arrays["orig_id"][: len(arrays["x"])]])
    graph = DistGraph.load(d / "p1", ProcessGrid())
    torch.testing.assert_close(graph.target, data.target[graph.orig_id.long()])


def test_the_trainer_checkpoints_and_predict_take_the_toy_task(parts, tmp_path):
    from gnndist.cli import main
    from gnndist.config import OptimConfig, RunConfig, TaskConfig, TrainConfig
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    d, data = parts
    ck = tmp_path / "ck"
    cfg = TrainConfig(optim=OptimConfig(epochs=3), run=RunConfig(progress=False, checkpoint=str(ck)),
                      task=TaskConfig(task="degree"))
    graph = DistGraph.load(d / "p1", ProcessGrid())
    trainer = Trainer(graph, cfg)
    summary = trainer.fit()
    assert summary.metric == "closeness" and 0 < summary.best.val <= 1 and summary.best.epoch >= 0
    trainer.model.eval()
    with torch.no_grad():
        final = trainer.model(graph, graph.x)[:, :1]  # [n_owned, 1]
    expected = torch.zeros(graph.num_nodes, 1)
    expected[graph.orig_id[: graph.n_owned].long()] = final
    last = str(sorted(ck.glob("ckpt-*.pt"))[-1])
    out = tmp_path / "values.npy"
    assert main(["predict", str(d / "p1"), "--checkpoint", last, "--what", "values", "--out", str(out),
                 "--no-progress"]) == 0
    torch.testing.assert_close(torch.from_numpy(np.load(out)), expected)
    # on 2 ranks (spawned: they register the task as they import this module): the same values
    req = PredictRequest(last, str(tmp_path / "values-2.npy"), "values", progress=False)
    run_distributed(_predict, 2, str(d / "p2"), req)
    torch.testing.assert_close(torch.from_numpy(np.load(req.out)), expected, rtol=1e-5, atol=1e-6)


def _predict(grid, partdir, req):
    """``gnndist predict``'s rank body, importable by spawned ranks (which then register the toy task)."""
    return predict_rank(grid, partdir, req)


def test_predict_refuses_what_the_toy_task_does_not_write(parts):
    from gnndist.config import TaskConfig, TrainConfig
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.tasks import task_for

    d, _ = parts
    graph = DistGraph.load(d / "p1", ProcessGrid())
    task = task_for(graph, TrainConfig(task=TaskConfig(task="degree")))
    with pytest.raises(UserError, match="the checkpoint is a degree regressor; it writes --what values or embedding"):
        task.check_output("probs")
