"""Segment softmax: reference against PyG's softmax; Triton against the reference."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import segment_softmax
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    graph,
    leaf,
    power_law_graph,
    softmax_magnitude,
)
from torch_geometric.utils import softmax

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-H{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-H37-bf16") for g in GRAPHS]


def _check(name, csr, scores):
    lengths = csr.in_degree()[csr.row.long()]  # [nnz]: every edge's row length
    check(name, lambda **t: segment_softmax(csr, impl="triton", **t),
          lambda **t: segment_softmax(csr, impl="reference", **t), {"scores": scores},
          {"out": lengths, "scores": lengths}, softmax_magnitude(csr))


@pytest.mark.parametrize("name", GRAPHS)
def test_reference_matches_pyg(name):
    csr = graph(name)
    scores = leaf((csr.nnz, 3), torch.float64, "cpu", 0)
    expected = softmax(scores, csr.row.long(), num_nodes=csr.n_rows)
    assert_close("softmax", expected, segment_softmax(csr, scores, impl="reference"), 1e-12)
    assert torch.autograd.gradcheck(lambda s: segment_softmax(csr, s, impl="reference"), (scores,), fast_mode=True)


def test_reference_is_stable_for_large_scores():
    csr = graph("power-law-int32")
    scores = torch.randn(csr.nnz) * 1e4
    out = segment_softmax(csr, scores, impl="reference")
    assert torch.isfinite(out).all()
    sums = torch.zeros(csr.n_rows).index_add_(0, csr.row, out)
    assert_close("row sums", (csr.in_degree() > 0).float(), sums)


@pytest.mark.triton
@pytest.mark.parametrize("name, heads, dtype", CASES)
def test_triton_matches_reference(name, heads, dtype):
    csr = graph(name, DEVICE)
    _check("softmax triton", csr, leaf((csr.nnz, heads), DTYPES[dtype], DEVICE, 0))


@pytest.mark.triton
def test_triton_1d_scores_and_large_values():
    csr = graph("power-law-int32", DEVICE)
    scores = (torch.randn(csr.nnz) * 1e4).to(DEVICE).requires_grad_()
    _check("softmax triton 1-d", csr, scores)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("heads", [1, 8, 37])
def test_cuda_large(heads, dtype):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, device="cuda")
    _check("softmax cuda", csr, leaf((csr.nnz, heads), DTYPES[dtype], "cuda", 0))
