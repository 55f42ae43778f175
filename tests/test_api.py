"""The public Python API: a read-only graph with explicit step state, a trainer that takes a model,
``gnndist.launch``."""

from __future__ import annotations

import os
import weakref

import pytest
import torch

import gnndist
from gnndist.config import TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import RanksFailed, UserError
from gnndist.graph import DistGraph
from gnndist.nn import build_model
from gnndist.training.trainer import Trainer


def _cfg(epochs: int = 3) -> TrainConfig:
    cfg = TrainConfig()
    cfg.optim.epochs, cfg.run.progress = epochs, False
    return cfg


def test_graph_is_read_only_and_steps_live_in_its_context(part1):
    graph = DistGraph.load(part1, ProcessGrid())
    for name, value in (("x", graph.x * 2), ("seed", 1), ("epoch", 3), ("strategy", None), ("recomputing", True)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(graph, name, value)
    x = torch.ones(graph.n_owned, 4)
    with graph.context.step(seed=0, epoch=1):
        a = graph.dropout(x, 0.5, key=1)
    with graph.context.step(seed=0, epoch=2) as step:
        assert (step.seed, step.epoch) == (0, 2)
        b = graph.dropout(x, 0.5, key=1)
    with graph.context.step(seed=0, epoch=1):
        assert torch.equal(a, graph.dropout(x, 0.5, key=1)), "the mask is a function of (seed, epoch, key, id)"
    assert not torch.equal(a, b)
    assert graph.context.current.epoch == 0  # the step closed


@pytest.mark.parametrize("dense", [True, False], ids=["dense-x", "sparse-x"])
def test_dropped_rows_are_rebuilt_for_the_backward_not_kept(part1, monkeypatch, dense):
    """Inside a step a dropout's output that the next layer saves is made again in the backward: nothing of it lives
    between forward and backward, and the gradients are bit for bit those of keeping it."""
    from gnndist.context import RunContext

    graph = DistGraph.load(part1, ProcessGrid())
    x = torch.rand(graph.n_owned, graph.x.shape[1]) if dense else graph.x  # Cora's x: the mostly-zero path
    lin = torch.nn.Linear(x.shape[1], 7)
    outs = []

    def step(keep: bool):
        if keep:
            monkeypatch.setattr(RunContext, "rebuildable", lambda self, out, build: out)
        lin.zero_grad()
        with graph.context.step(seed=3, epoch=2):
            d = graph.dropout(x, 0.5, key=0)
            outs.append(weakref.ref(d))
            loss = graph.spmm(lin(d)).square().sum()
            del d
            alive = outs[-1]() is not None
            assert keep or not graph.context._rebuildable, \
                "a dead output's recipe lives on only where autograd saved it"
            loss.backward()
        monkeypatch.undo()
        return alive, lin.weight.grad.clone()

    rebuilt_alive, rebuilt = step(keep=False)
    kept_alive, kept = step(keep=True)
    assert kept_alive and not rebuilt_alive
    assert torch.equal(rebuilt, kept)


@pytest.mark.parametrize("dense", [True, False], ids=["dense-x", "sparse-x"])
def test_half_dropped_features_are_rebuilt_in_the_compute_dtype(part1, monkeypatch, dense):
    """Under autocast the input features leave the dropout in the autocast dtype, as the first layer would cast
    them: the layer saves that rebuildable tensor (nothing of it lives between forward and backward) instead of
    autocast's copy, and the gradients are bit for bit those of dropping in fp32 and letting autocast cast."""
    graph = DistGraph.load(part1, ProcessGrid())
    if dense:  # Cora's x is mostly zero: taken as dense features, the dense dropout runs on it
        graph._set(feature_density=1.0, sparse_features=False)
    lin = torch.nn.Linear(graph.x.shape[1], 7)
    grads = []
    for x in (graph.x, graph.x.clone()):  # the features themselves; a copy of them, not the graph's features
        lin.zero_grad()
        with graph.context.step(seed=3, epoch=2), torch.autocast("cpu", dtype=torch.bfloat16):
            d = graph.dropout(x, 0.5, key=0)
            assert d.dtype == (torch.bfloat16 if x is graph.x else torch.float32)
            ref = weakref.ref(d)
            loss = graph.spmm(lin(d)).float().square().sum()
            del d
            assert ref() is None, "the dropped rows are rebuilt for the backward, not kept"
        loss.backward()
        grads.append(lin.weight.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_trainer_takes_a_model_factory_or_module(part1):
    """A factory gets (in_channels, out_channels) after seeding: the same model as --model trains the same."""
    graph = DistGraph.load(part1, ProcessGrid())
    ref = Trainer(graph, _cfg()).fit()
    m = TrainConfig().model

    def factory(f_in, f_out):
        return build_model("gcn", f_in, m.hidden, f_out, m.layers, m.dropout)

    got = Trainer(graph, _cfg(), model=factory).fit()
    assert [r["loss"] for r in got.history] == [r["loss"] for r in ref.history]
    torch.manual_seed(0)
    module = factory(graph.x.shape[1], graph.num_classes)
    again = Trainer(graph, _cfg(), model=module).fit()
    assert [r["loss"] for r in again.history] == [r["loss"] for r in ref.history]
    assert ref.to_dict()["test_acc"] == ref.best.test


def test_lr_decay_every_steps_the_learning_rate_as_refined_gae(part1):
    """``--lr-decay-every N``: lr x max(1 - e / epochs, 1e-4) from each multiple e of N on; a constant lr without."""
    from gnndist.training.trainer import lr_factor

    assert [lr_factor(e, 100, 500) for e in (0, 99, 100, 250, 499)] == pytest.approx([1.0, 1.0, 0.8, 0.6, 0.2])
    assert lr_factor(9, 10, 10) == 1.0 and lr_factor(10, 10, 10) == 1e-4 and lr_factor(7, 0, 10) == 1.0
    cfg = _cfg(epochs=4)
    cfg.optim.lr_decay_every = 2
    trainer = Trainer(DistGraph.load(part1, ProcessGrid()), cfg)
    seen = []
    for epoch in range(4):
        trainer.train_step(epoch)
        seen.append(trainer.optim.param_groups[0]["lr"])
    assert seen == pytest.approx([cfg.optim.lr] * 2 + [cfg.optim.lr * 0.5] * 2, rel=1e-12)


def _sum_ranks(grid, offset):
    t = torch.tensor([float(grid.rank + offset)])
    grid.all_reduce_(t)
    return grid.world_size, float(t)


def _fail_on_rank1(grid):
    if grid.rank == 1:
        raise UserError("rank 1 refuses")
    grid.barrier()


def test_launch_runs_a_function_on_every_rank(monkeypatch):
    import multiprocessing as mp

    monkeypatch.setenv("GNNDIST_CHECK_COLLECTIVES", "0")  # two bare collectives: nothing to compare
    ctx = mp.get_context("spawn")
    done = ctx.Event()
    own = ctx.Process(target=done.wait, args=(120,))  # the caller's own worker, alive through the launch
    own.start()
    try:  # (the launcher must not wait for multiprocessing's helper, which that worker keeps alive)
        assert gnndist.launch(_sum_ranks, 10, ranks=2, timeout=60) == (2, 21.0)  # rank 0's result: 10 + 11
    finally:
        done.set()
        own.join(10)
        del done  # its semaphore goes now, not at the helper's stop after the next launch
    assert gnndist.launch(_sum_ranks, 10, ranks=1) == (1, 10.0)  # one rank: in this process
    from multiprocessing import resource_tracker

    keep = ctx.Lock()  # the caller's semaphore, tracked by the caller's helper: a launch leaves both alone
    helper = resource_tracker._resource_tracker._pid
    with pytest.raises(RanksFailed, match="rank 1 refuses") as e:
        gnndist.launch(_fail_on_rank1, ranks=2, timeout=20)
    assert e.value.code == 2
    assert resource_tracker._resource_tracker._pid == helper and helper is not None
    os.kill(helper, 0)  # still running: it would have unlinked `keep` on stopping
    assert keep.acquire(timeout=1)
    keep.release()
