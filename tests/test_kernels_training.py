"""Every model trains through the Triton kernels (``--kernel triton``) as through the reference path.

On a GPU, measured dispatch picks the Triton SpMM wherever it wins, so training must run on
it: forward, every gradient, and the layers' in-place use of the kernels' outputs (GCN's
scale and self loop), on the GPU when there is one. Without a GPU the kernels run under
``TRITON_INTERPRET=1``, so the graph is small.
"""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.kernels import KernelSettings
from gnndist.partition import partition

from gnndist.config import DistConfig, TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.nn.models import MODELS
from gnndist.strategies import strategy_from_config
from gnndist.testing import assert_close, train_steps
from gnndist.training.trainer import Trainer

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

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


def _train(partdir, model: str, kernel: KernelSettings) -> dict:
    """Two epochs with dropout; then, from a fresh model, one step's gradients without (kernels: ``kernel``)."""
    # not overlapped: the layers get the kernel's own output (overlapped, it is a sum of two), in place or not
    strategy = strategy_from_config(DistConfig(strategy="1d", overlap=False))
    grid = ProcessGrid(device=torch.device(DEVICE))  # every array of the graph on DEVICE
    graph = DistGraph.load(partdir, grid, strategy=strategy, kernel=kernel)
    # fit()'s steps, without its evaluation (interpreted: slow)
    losses = torch.tensor(train_steps(Trainer(graph, _cfg(model, 0.5))), dtype=torch.float64)  # [2]
    graph = DistGraph.load(partdir, grid, kernel=kernel)
    trainer = Trainer(graph, _cfg(model, 0.0))
    trainer.model.train()
    logits = trainer.model(graph, graph.x)
    trainer.task.objective(logits).backward()
    return dict(losses=losses, logits=logits.detach(),
                grads={n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})


@pytest.mark.parametrize("model", sorted(n for n, s in MODELS.items() if not s.hetero))  # typed: test_hetero.py
def test_training_through_triton_equals_reference(part, model):
    ref = _train(part, model, KernelSettings("reference"))
    got = _train(part, model, KernelSettings("triton"))
    assert_close(f"{model} losses", ref["losses"], got["losses"], rtol=1e-5)
    assert_close(f"{model} logits", ref["logits"], got["logits"], rtol=1e-5, atol=1e-6)
    assert sorted(ref["grads"]) == sorted(got["grads"]), model
    for n, g in ref["grads"].items():
        assert_close(f"{model} grad {n}", g, got["grads"][n], rtol=1e-4, atol=1e-6)


def _ops(csr, n: int):
    """Each op with inputs that require grad: name -> (implementations, call(impl))."""
    from gnndist import kernels

    x = torch.randn(n, 3, 4, device=DEVICE, requires_grad=True)  # [n, H, D]: the multi-head shapes, views' source
    w = torch.rand(csr.nnz, 3, device=DEVICE, requires_grad=True)  # [nnz, H]
    s = torch.randn(csr.nnz, 3, device=DEVICE, requires_grad=True)  # [nnz, H]
    x2 = torch.randn(n, 5, device=DEVICE, requires_grad=True)  # [n, F]
    return {
        "spmm": (("triton", "sparse", "reference"), lambda i: kernels.spmm(csr, x2, impl=i)),
        "spmm per head": (("triton", "reference"), lambda i: kernels.spmm(csr, x, w, impl=i)),
        "sddmm add": (("triton", "reference"), lambda i: kernels.sddmm(csr, x[:, :, 0], x[:, :, 1], impl=i)),
        "sddmm dot": (("triton", "reference"), lambda i: kernels.sddmm(csr, x, x, "dot", impl=i)),
        "sddmm dot 2d": (("triton", "reference"), lambda i: kernels.sddmm(csr, x2, x2, "dot", impl=i)),
        "segment_softmax": (("triton", "reference"), lambda i: kernels.segment_softmax(csr, s, impl=i)),
        "segment_max": (("triton", "reference"), lambda i: kernels.segment_max(csr, x2, impl=i)),
    }


@pytest.mark.parametrize("empty", [False, True], ids=["edges", "no-edges"])
def test_every_kernel_output_may_be_modified_in_place(empty):
    """No path hands out a view of its own buffer (autograd forbids in-place writes to those), with or without edges."""
    from gnndist.kernels import CSR

    n = 7
    row = torch.tensor([], dtype=torch.long) if empty else torch.tensor([0, 0, 1, 3, 3, 3, 6])
    col = torch.tensor([], dtype=torch.long) if empty else torch.tensor([1, 2, 0, 4, 5, 6, 0])
    csr = CSR.from_coo(row, col, n, n).to(DEVICE)
    for name, (impls, call) in _ops(csr, n).items():
        for impl in impls:
            out = call(impl)
            assert out._base is None, f"{name} ({impl}) returns a view"
            if name == "segment_softmax":  # its backward reads its output (as torch.softmax's does): not in place
                out = out * 2.0
            out.mul_(2.0).sum().backward()  # raises for a custom Function's view
