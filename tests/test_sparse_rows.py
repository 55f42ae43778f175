"""Sparse input features (``SparseRows``): the first linear map as an SpMM over the nonzeros equals the dense one.

The map alone against a float64 reference (forward, weight and bias gradients; odd widths, empty rows; fp32 and
half under autocast); then every model whose first layer takes them, trained 3 steps with ``--sparse-features on``
on P = 1, 2, 3 ranks against one process with ``off`` (dense): logits, first loss and gradients within the fp32
contract, or the half precisions' derived bound.
"""

import pytest
import torch
import torch.nn.functional as F
from gnndist.kernels import DTYPES, KernelSettings
from gnndist.partition import partition

from gnndist.config import DistConfig, TrainConfig
from gnndist.graph import DistGraph
from gnndist.sparse_rows import SparseRows, rows_of
from gnndist.testing import QUICK_PARTITION, assert_close, p_differences, record_steps, run_distributed
from gnndist.training.precision import p_bound

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

STEPS = 3
FP32 = 1e-6  # forward and first loss of one step, relative (the contract; measured 0.9-1.5e-7)
# gradients: of the model's largest entry, as tests/test_deep_models.py holds them (1e-6 of it plus 1e-6 of the
# tensor's own); ResGCN+'s batch norm measured 1.1e-6 at P = 2 (two summation orders: sparse rows and P)
FP32_GRAD = 2e-6


def _features(n: int, f: int, density: float, seed: int = 0, empty_rows: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, f, generator=g) < density).float() * torch.rand(n, f, generator=g) * 3
    x[:empty_rows] = 0
    return x  # [n, f], mostly zeros


@pytest.mark.parametrize("f_in,f_out", [(1, 5), (37, 16), (128, 37)], ids=["F1", "F37", "F128"])
def test_linear_on_sparse_rows_equals_dense(f_in, f_out):
    x = _features(300, f_in, 0.05, empty_rows=7)
    rows = rows_of(x, KernelSettings())
    assert rows.csr.nnz == int(torch.count_nonzero(x)) and rows.shape == x.shape
    torch.manual_seed(0)
    lin = torch.nn.Linear(f_in, f_out).double()
    grad = torch.randn(300, f_out, dtype=torch.float64)
    ref = lin(x.double())
    ref.backward(grad)
    want = {"out": ref.detach(), "weight": lin.weight.grad.clone(), "bias": lin.bias.grad.clone()}
    lin = lin.float()
    lin.zero_grad()
    out = lin(rows)  # F.linear on SparseRows
    out.backward(grad.float())
    assert_close("out", want["out"], out)
    assert_close("weight grad", want["weight"], lin.weight.grad)
    assert_close("bias grad", want["bias"], lin.bias.grad)
    assert_close("rows @ W^T", want["out"] - lin.bias.detach().double(), rows @ lin.weight.detach().t())


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_linear_on_sparse_rows_under_autocast(precision):
    """Under autocast the map runs in the half dtype as the dense one does (fp32 sums: within a rounding of it)."""
    x = _features(200, 64, 0.04)
    rows = rows_of(x, KernelSettings())
    lin = torch.nn.Linear(64, 16)
    dtype = DTYPES[precision]
    with torch.autocast("cpu", dtype=dtype):
        dense, sparse = lin(x), lin(rows)
    assert sparse.dtype == dense.dtype == dtype
    unit = 2.0**-8 if precision == "bf16" else 2.0**-11
    assert_close("half forward", dense.float(), sparse.float(), rtol=4 * unit)
    sparse.float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32


def test_sparse_rows_refuse_other_ops_in_one_line():
    rows = rows_of(_features(10, 8, 0.2), KernelSettings())
    with pytest.raises(TypeError, match="linear maps only"):
        torch.relu(rows)
    assert torch.equal(rows.to_dense(), _features(10, 8, 0.2))


# ------------------------------------------------------------------------------------------------ every model
# (model, norm, layers, precisions): every model whose first layer is a linear map of the features
CASES = [
    ("gcn", "none", 2, ("fp32", "bf16", "fp16")),
    ("sage", "none", 2, ("fp32", "bf16")),
    ("gat", "none", 2, ("fp32",)),
    ("gcn2", "none", 3, ("fp32",)),
    ("resgcn", "batch", 3, ("fp32",)),
    ("revgnn", "batch", 3, ("fp32", "fp16")),
]


def _data():
    from gnndist.datasets import synthetic

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    data.x = _features(240, 96, 0.03, seed=1, empty_rows=3)  # a bag of words: 3 % of the cells
    data.train_mask[:] = False
    data.train_mask[::3] = True
    return data


def _cfg(model, norm, layers, precision, sparse):
    cfg = TrainConfig()
    m = cfg.model
    m.model, m.norm, m.layers, m.dropout, m.sparse_features = model, norm, layers, 0.3, sparse
    m.hidden = 16 if model == "gat" else 8
    cfg.optim.epochs, cfg.optim.precision = STEPS, precision
    cfg.optim.loss_scale = 2.0**10
    cfg.run.progress = False
    return cfg


def _rank_job(grid, partdir):
    out = {}
    seen = []  # whether a linear map met SparseRows, per run
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, args: seen.append(True) if any(isinstance(a, SparseRows) for a in args) else None)
    try:
        for model, norm, layers, precisions in CASES:
            for precision in precisions:
                for sparse in ("on", "off") if grid.world_size == 1 else ("on",):
                    seen.clear()
                    out[model, precision, sparse] = record_steps(grid, partdir, _cfg(model, norm, layers, precision,
                                                                                     sparse), DistConfig())
                    out[model, precision, sparse]["sparse_seen"] = bool(seen)
    finally:
        hook.remove()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = _data()
    results = {}
    for world in (1, 3):  # 3 ranks: halo rows from two others (2 proved nothing more)
        d = tmp_path_factory.mktemp(f"p{world}")
        partition(data, world, progress=False, **QUICK_PARTITION).save(d, dataset="bow", progress=False)
        results[world] = run_distributed(_rank_job, world, str(d))
    return data, results


@pytest.mark.parametrize("case,world,precision", [
    pytest.param(c, w, p, id=f"{c[0]}-P{w}-{p}") for c in CASES for p in c[3] for w in (1, 3)])
def test_sparse_first_layer_equals_dense_one_process(runs, case, world, precision):
    data, results = runs
    model, _, layers, _ = case
    ref = results[1][0][model, precision, "off"]
    got = [r[model, precision, "on"] for r in results[world]]
    assert all(r["sparse_seen"] for r in got) and not ref["sparse_seen"], "the sparse path was not (only) taken"
    diff = p_differences([ref], got, data.num_nodes)
    bound = p_bound(DTYPES[precision], layers) if precision != "fp32" else None
    step, grad = (bound.step, bound.grad) if bound else (FP32, FP32_GRAD)
    for what in ("forward", "first_loss"):
        assert diff[what] <= step, f"{what}: {diff[what]:.2e} > {step:.2e}"
    assert diff["grad"] <= grad, f"gradients: {diff['grad']:.2e} of the largest > {grad:.2e}"


def test_auto_takes_sparse_features_by_density(tmp_path):
    """``auto``: the bag of words (3 %) is sparse; dense features (synthetic, ~100 %) are not; F.linear is exact."""
    from gnndist.partition import load

    from gnndist.dist.grid import ProcessGrid

    data = _data()
    partition(data, 1, progress=False, **QUICK_PARTITION).save(tmp_path / "bow", dataset="bow", progress=False)
    graph = DistGraph(*load(tmp_path / "bow", 0), ProcessGrid())
    assert graph.sparse_features
    rows = graph.input_rows(graph.x)
    assert isinstance(rows, SparseRows) and torch.equal(rows.to_dense(), graph.x)
    assert graph.input_rows(graph.x.clone()) is not rows, "only the features themselves are taken as sparse"
    w = torch.randn(5, graph.x.shape[1])
    assert_close("F.linear", F.linear(graph.x, w), F.linear(rows, w))
    from gnndist.datasets import synthetic

    dense = synthetic(100, num_features=8, seed=0)
    partition(dense, 1, progress=False, **QUICK_PARTITION).save(tmp_path / "dense", dataset="d", progress=False)
    graph = DistGraph(*load(tmp_path / "dense", 0), ProcessGrid())
    assert not graph.sparse_features and graph.input_rows(graph.x) is graph.x
