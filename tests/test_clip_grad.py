"""``--clip-grad``: the global norm over every rank's parameters, as one process clips (torch's rule), at any P.

A node task (replicated weights only) and a featureless link task (each rank's learned rows are its own: their
squares are all-reduced) train a few epochs with clipping active on P = 1, 2, 3; the per-epoch losses and the
first step's clipped gradients equal one process's. One process equals ``torch.nn.utils.clip_grad_norm_``.
``--clip-grad-apart`` (Refined-GAE's): the link model's encoder, decoder and learned rows clipped each to the norm.
"""

import pytest
import torch

from gnndist.dist.grid import ProcessGrid
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import clip_global_norm

EPOCHS = 3
CLIP = 0.05  # well under both models' gradient norms: every step is clipped
CLIP_APART = 0.005  # under the link encoder's norm alone (about 0.009) too: each of the three groups is clipped


def test_one_process_clips_as_torch():
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3, generator=g)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 10
    twins = [torch.nn.Parameter(torch.zeros_like(p)) for p in params]
    for t, p in zip(twins, params):
        t.grad = p.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(twins, CLIP)
    got = clip_global_norm(params[:2], params[2:], CLIP, ProcessGrid())  # replicated and sharded alike on one
    assert got == pytest.approx(float(norm), rel=1e-6)
    for p, t in zip(params, twins):
        torch.testing.assert_close(p.grad, t.grad, rtol=1e-6, atol=0)
    assert float(torch.cat([p.grad.reshape(-1) for p in params]).norm()) == pytest.approx(CLIP, rel=1e-5)


def _node_data():
    from gnndist.datasets import synthetic

    return synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)


def _link_data():
    from gnndist.datasets import synthetic
    from gnndist.datasets.edge_split import random_edge_split, set_edge_split

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    split, message = random_edge_split(data.edge_index, 240, (0.8, 0.1, 0.1), seed=3)
    set_edge_split(data, split, message)
    data.x = torch.zeros(240, 0)  # featureless: the model learns each node's row, sharded over the ranks
    return data


def _cfg(task, clip):
    from gnndist.config import TrainConfig

    cfg = TrainConfig()
    if task == "link-apart":
        task, cfg.optim.clip_grad_apart = "link", True
    cfg.model.hidden, cfg.model.dropout, cfg.model.normalize_features = 8, 0.5, False
    cfg.task.task = task
    if task == "link":
        cfg.task.decoder = "mlp"
    cfg.optim.epochs, cfg.optim.clip_grad, cfg.run.progress = EPOCHS, clip, False
    return cfg


def _rank_job(grid, dirs):
    from gnndist.graph import DistGraph
    from gnndist.training.trainer import Trainer

    out = {}
    for task, clip in (("node", CLIP), ("link", CLIP), ("node", 0.0), ("link-apart", CLIP_APART)):
        graph = DistGraph.load(dirs[task.split("-")[0]], grid)
        trainer = Trainer(graph, _cfg(task, clip))
        losses, grads = [], None
        for epoch in range(EPOCHS):
            with graph.context.step(seed=0, epoch=epoch):
                losses.append(trainer.train_step(epoch))
            if grads is None:
                grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()
                         if p.grad is not None and id(p) not in {id(q) for q in trainer.sharded}}
        out[(task, clip)] = dict(losses=losses, grads=grads)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gnndist.partition import partition

    data = {"node": _node_data(), "link": _link_data()}
    results = {}
    for world in (1, 2, 3):
        dirs = {}
        for task, d in data.items():
            out = tmp_path_factory.mktemp(f"clip-{task}-p{world}")
            partition(d, world, **QUICK_PARTITION).save(out, dataset="toy", progress=False)
            dirs[task] = str(out)
        results[world] = run_distributed(_rank_job, world, dirs)
    return results


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("task", ["node", "link", "link-apart"])
def test_clipped_training_equals_one_process(runs, world, task):
    clip = CLIP_APART if task == "link-apart" else CLIP
    one = runs[1][0][(task, clip)]
    ref = torch.tensor(one["losses"], dtype=torch.float64)
    scale = max(g.abs().max().item() for g in one["grads"].values())
    for got in runs[world]:
        got = got[(task, clip)]
        assert_close(f"{task} losses P={world}", ref, torch.tensor(got["losses"], dtype=torch.float64), rtol=1e-5)
        for name, g in one["grads"].items():
            assert (got["grads"][name] - g).abs().max().item() <= 1e-6 * scale, name
    if task == "node":  # the clip is active: the replicated gradients' norm is the clip, and training differs
        norm = torch.cat([g.reshape(-1) for g in one["grads"].values()]).norm().item()
        assert norm == pytest.approx(CLIP, rel=1e-5)
        assert runs[1][0][("node", 0.0)]["losses"][1:] != one["losses"][1:]
    if task == "link-apart":  # the encoder's and the decoder's gradients each have the clip's norm (the encoder's
        # without the rows': a group of their own); training differs from one norm
        for part in ("encoder.", "decoder."):
            norm = torch.cat([g.reshape(-1) for n, g in one["grads"].items() if n.startswith(part)]).norm().item()
            assert norm == pytest.approx(CLIP_APART, rel=1e-3), part  # torch's rule: max_norm / (norm + 1e-6)
        assert runs[1][0][("link", CLIP)]["losses"][1:] != one["losses"][1:]
