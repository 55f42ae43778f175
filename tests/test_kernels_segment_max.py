"""Segment max: reference against PyG's scatter max; Triton against the reference, ties included."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import CSR, segment_max
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    graph,
    leaf,
    power_law_graph,
    selection_magnitude,
)
from torch_geometric.utils import scatter

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-F{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-F37-bf16") for g in GRAPHS]


def _check(name, csr, x, run=None):
    reference = lambda x: segment_max(csr, x, impl="reference")  # noqa: E731
    check(name, run or (lambda x: segment_max(csr, x, impl="triton")), reference, {"x": x},
          {"out": 0, "x": csr.out_degree()}, selection_magnitude(reference))


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
    _check("max triton", csr, _with_ties(csr, width, DTYPES[dtype], DEVICE))


def _tie_graph(device):
    """Row 0 has 100 edges (several tiles), rows 1-30 up to 7; 60 sources, so rows repeat sources."""
    g = torch.Generator().manual_seed(5)
    lengths = torch.cat([torch.tensor([100]), torch.randint(0, 8, (30,), generator=g)])
    row = torch.repeat_interleave(torch.arange(31), lengths)
    col = torch.randint(0, 60, (row.numel(),), generator=g)
    return CSR.from_coo(row, col, 31, 60).to(device)


@pytest.mark.triton
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37])
def test_triton_ties_go_to_the_first_edge_exactly(width, dtype):
    csr = _tie_graph(DEVICE)
    g = torch.Generator().manual_seed(6)
    x0 = torch.randint(-2, 3, (csr.num_cols, width), generator=g).to(DEVICE, DTYPES[dtype])  # ties everywhere
    r = torch.randint(-3, 4, (csr.n_rows, width), generator=g).to(DEVICE, DTYPES[dtype])  # sums stay exact
    results = {}
    for impl in ("triton", "reference"):
        x = x0.clone().requires_grad_()
        out = segment_max(csr, x, impl=impl)
        results[impl] = out.detach(), torch.autograd.grad(out, x, r)[0]
    assert torch.equal(results["triton"][0], results["reference"][0])
    assert torch.equal(results["triton"][1], results["reference"][1])


@pytest.mark.triton
def test_triton_row_of_minus_inf():
    csr = _tie_graph(DEVICE)
    x = torch.full((csr.num_cols, 3), float("-inf"), device=DEVICE)
    x[:, 1] = 1.0
    assert torch.equal(segment_max(csr, x, impl="triton"), segment_max(csr, x, impl="reference"))


def test_check_catches_a_wrong_tie_break():
    csr = _tie_graph("cpu")
    split = lambda x: scatter(x[csr.col.long()], csr.row.long(), 0, dim_size=csr.n_rows, reduce="max")  # noqa: E731
    x = _with_ties(csr, 5, torch.float32, "cpu")
    with pytest.raises(AssertionError, match="grad x"):  # PyG splits a tie's gradient among the tied edges
        _check("max split ties", csr, x, run=split)


@pytest.mark.triton
def test_triton_no_edges():
    csr = graph("no-edges", DEVICE)
    assert not segment_max(csr, torch.randn(7, 3, device=DEVICE), impl="triton").any()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37, 128, 512])
def test_cuda_large(width, dtype):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, device="cuda")
    _check("max cuda", csr, _with_ties(csr, width, DTYPES[dtype], "cuda"))
