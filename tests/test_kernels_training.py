"""Every model trains through the Triton kernels (``GNNDIST_KERNEL=triton``) as through the reference path.

On a GPU, measured dispatch picks the Triton SpMM wherever it wins, so training must run on
it: forward, every gradient, and the layers' in-place use of the kernels' outputs (GCN's
scale and self loop). Without a GPU the kernels run under ``TRITON_INTERPRET=1`` (set in
``conftest.py``), so the graph is small.
"""

import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.partition import partition

from gnndist.config import TrainConfig
from gnndist.graph import DistGraph
from gnndist.grid import ProcessGrid
from gnndist.nn.models import MODELS
from gnndist.strategies import get_strategy
from gnndist.testing import assert_close
from gnndist.trainer import Trainer

pytestmark = pytest.mark.triton
NORMS = {"gin": "batch", "resgcn": "layer", "revgnn": "layer"}  # the norm each model is usually trained with


@pytest.fixture(scope="module")
def part(tmp_path_factory):
    data = synthetic(24, avg_degree=4, num_classes=3, num_features=6, seed=3)
    g = torch.Generator().manual_seed(0)
    data.edge_attr = torch.rand(data.edge_index.shape[1], 2, generator=g)  # [E, 2] for the edge-feature models
    d = tmp_path_factory.mktemp("triton-train")
    partition(data, 1, progress=False).save(d, dataset="toy", progress=False)
    return d


def _cfg(model: str, dropout: float) -> TrainConfig:
    cfg = TrainConfig()
    cfg.model.model, cfg.model.norm, cfg.model.hidden, cfg.model.layers = model, NORMS.get(model, "none"), 8, 2
    cfg.model.dropout, cfg.model.normalize_features = dropout, False
    cfg.optim.epochs, cfg.run.progress = 2, False
    return cfg


def _train(partdir, model: str) -> dict:
    """Two epochs with dropout; then, from a fresh model, one step's gradients without (kernels: the environment's)."""
    # not overlapped: the layers get the kernel's own output (overlapped, it is a sum of two), in place or not
    trainer = Trainer(DistGraph.load(partdir, ProcessGrid(), strategy=get_strategy("1d", overlap=False)),
                      _cfg(model, 0.5))
    trainer.fit()
    losses = torch.tensor([r["loss"] for r in trainer.history], dtype=torch.float64)  # [2]
    graph = DistGraph.load(partdir, ProcessGrid())
    trainer = Trainer(graph, _cfg(model, 0.0))
    trainer.model.train()
    logits = trainer.model(graph, graph.x)
    trainer.loss(logits).backward()
    return dict(losses=losses, logits=logits.detach(),
                grads={n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})


@pytest.mark.parametrize("model", sorted(MODELS))
def test_training_through_triton_equals_reference(part, model, monkeypatch):
    monkeypatch.setenv("GNNDIST_KERNEL", "reference")
    ref = _train(part, model)
    monkeypatch.setenv("GNNDIST_KERNEL", "triton")
    got = _train(part, model)
    assert_close(f"{model} losses", ref["losses"], got["losses"], rtol=1e-5)
    assert_close(f"{model} logits", ref["logits"], got["logits"], rtol=1e-5, atol=1e-6)
    assert sorted(ref["grads"]) == sorted(got["grads"]), model
    for n, g in ref["grads"].items():
        assert_close(f"{model} grad {n}", g, got["grads"][n], rtol=1e-4, atol=1e-6)
