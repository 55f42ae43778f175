"""Segment max: reference against PyG's scatter max; Triton against the reference, ties included."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import segment_max
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    graph,
    leaf,
    power_law_graph,
)
from torch_geometric.utils import scatter

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-F{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-F37-bf16") for g in GRAPHS]


def _with_ties(csr, width, dtype, device):
    x = leaf((csr.num_cols, width), dtype, device, 0)
    with torch.no_grad():
        x[1::3] = x[0]  # many rows see equal maxima from different sources
    return x


@pytest.mark.parametrize("name", GRAPHS)
def test_reference_matches_pyg(name):
    csr = graph(name)
    x = leaf((csr.num_cols, 6), torch.float64, "cpu", 0)
    expected = scatter(x[csr.col.long()], csr.row.long(), 0, dim_size=csr.n_rows, reduce="max")
    assert_close("max", expected, segment_max(csr, x, impl="reference"), 1e-12)
    assert torch.autograd.gradcheck(lambda x: segment_max(csr, x, impl="reference"), (x,), fast_mode=True)


def test_reference_gradient_goes_to_first_arg_max():
    from gnndist.kernels import CSR

    csr = CSR.from_coo(torch.tensor([0, 0, 0]), torch.tensor([2, 0, 1]), 2, 3)  # row 1 is empty
    x = torch.tensor([[5.0], [5.0], [1.0]], requires_grad=True)
    out = segment_max(csr, x, impl="reference")
    out.sum().backward()
    assert out.tolist() == [[5.0], [0.0]]
    assert x.grad.tolist() == [[1.0], [0.0], [0.0]]  # edges sorted by column: source 0 comes first


@pytest.mark.triton
@pytest.mark.parametrize("name, width, dtype", CASES)
def test_triton_matches_reference(name, width, dtype):
    csr = graph(name, DEVICE)
    check("max triton", lambda **t: segment_max(csr, impl="triton", **t),
          lambda **t: segment_max(csr, impl="reference", **t), {"x": _with_ties(csr, width, DTYPES[dtype], DEVICE)})


@pytest.mark.triton
def test_triton_no_edges():
    csr = graph("no-edges", DEVICE)
    assert not segment_max(csr, torch.randn(7, 3, device=DEVICE), impl="triton").any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37, 128, 512])
def test_cuda_large(width, dtype):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, device="cuda")
    check("max cuda", lambda **t: segment_max(csr, impl="triton", **t),
          lambda **t: segment_max(csr, impl="reference", **t), {"x": _with_ties(csr, width, DTYPES[dtype], "cuda")})
