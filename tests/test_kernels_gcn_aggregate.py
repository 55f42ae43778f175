"""Fused GCN aggregation: reference against PyG's GCNConv; torch.sparse and Triton against the reference."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import CSR, gcn_aggregate
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    graph,
    leaf,
    power_law_graph,
)
from torch_geometric.nn import GCNConv

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-F{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-F37-bf16") for g in GRAPHS]
VARIANTS = {"bias-relu": (True, True, True), "plain-no-self-loops": (False, False, False)}


def _inputs(csr, width, dtype, with_bias, device):
    inputs = {"x": leaf((csr.num_cols, width), dtype, device, 0)}
    if with_bias:
        inputs["bias"] = leaf((width,), dtype, device, 1)
    return inputs


def _dinv(csr, device):
    deg = torch.bincount(csr.col.long().cpu(), minlength=csr.num_cols) + 1.0  # [n_cols]
    return deg.pow(-0.5).to(device)


def test_reference_matches_pyg_gcnconv():
    full = graph("power-law-int32")  # square; drop self loops, which GCNConv would not add again
    keep = full.row != full.col
    csr = CSR.from_coo(full.row[keep], full.col[keep], full.n_rows, full.num_cols)
    x = torch.randn(csr.num_cols, 16, dtype=torch.float64)
    conv = GCNConv(16, 16).double()
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(16))
        conv.bias.normal_()
    edge_index = torch.stack([csr.col.long(), csr.row.long()])  # PyG: [source, target]
    dinv = (csr.in_degree().double() + 1).pow(-0.5)  # square graph: rows are columns
    expected = torch.relu(conv(x, edge_index))
    out = gcn_aggregate(csr, x, dinv, conv.bias.detach(), relu=True, impl="reference")
    assert_close("gcn", expected, out, 1e-12)


@pytest.mark.parametrize("impl", ["reference", "sparse"])
def test_gradcheck(impl):
    csr = graph("empty-rows-int64")
    x = leaf((csr.num_cols, 3), torch.float64, "cpu", 0)
    bias = leaf((3,), torch.float64, "cpu", 1)
    dinv = _dinv(csr, "cpu").double()
    assert torch.autograd.gradcheck(lambda x, b: gcn_aggregate(csr, x, dinv, b, impl=impl), (x, bias), fast_mode=True)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name, width, dtype", [c for c in CASES if c.values[2] == "fp32"])
def test_sparse_matches_reference(name, width, dtype, variant):
    csr = graph(name)
    with_bias, relu, loops = VARIANTS[variant]
    dinv = _dinv(csr, "cpu")
    check(f"gcn sparse {variant}", lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops,
                                                             impl="sparse", **t),
          lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], with_bias, "cpu"))


@pytest.mark.triton
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name, width, dtype", CASES)
def test_triton_matches_reference(name, width, dtype, variant):
    csr = graph(name, DEVICE)
    with_bias, relu, loops = VARIANTS[variant]
    dinv = _dinv(csr, DEVICE)
    check(f"gcn triton {variant}", lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops,
                                                             impl="triton", **t),
          lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], with_bias, DEVICE))


@pytest.mark.parametrize("impl", ["reference", "sparse", pytest.param("triton", marks=pytest.mark.triton)])
def test_no_edges_is_self_loop_only(impl):
    device = DEVICE if impl == "triton" else "cpu"
    csr = graph("no-edges", device)
    x = torch.randn(csr.num_cols, 4, device=device)
    dinv = torch.rand(csr.num_cols, device=device) + 0.5
    out = gcn_aggregate(csr, x, dinv, impl=impl)
    assert_close("self loops", (dinv[:5, None] ** 2) * x[:5], out)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37, 128, 512])
def test_cuda_large(width, dtype, variant):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, index_dtype=torch.int32, device="cuda")
    with_bias, relu, loops = VARIANTS[variant]
    dinv = _dinv(csr, "cuda")
    check(f"gcn cuda {variant}", lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops,
                                                           impl="triton", **t),
          lambda **t: gcn_aggregate(csr, dinv=dinv, relu=relu, add_self_loops=loops, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], with_bias, "cuda"))
