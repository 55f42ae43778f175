"""SDDMM: reference against dense products; Triton against the reference (outputs and gradients)."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import sddmm
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    graph,
    leaf,
    power_law_graph,
)

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-F{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-F37-bf16") for g in GRAPHS]
# op, heads (0: a is [n, F])
VARIANTS = {"add": ("add", 0), "dot": ("dot", 0), "dot-2heads": ("dot", 2)}


def _inputs(csr, width, dtype, heads, device):
    feat = (heads, width) if heads else (width,)
    return {"a": leaf((csr.n_rows, *feat), dtype, device, 0), "b": leaf((csr.num_cols, *feat), dtype, device, 1)}


def _terms(csr, width, op):
    """Terms per element: the dot's width (or one sum), a row's edges (grad a), a column's edges (grad b)."""
    return {"out": width if op == "dot" else 1, "a": csr.in_degree(), "b": csr.out_degree()}


@pytest.mark.parametrize("name", GRAPHS)
def test_reference_matches_dense(name):
    csr = graph(name)
    row, col = csr.row.long(), csr.col.long()
    a, b = torch.randn(csr.n_rows, 6, dtype=torch.float64), torch.randn(csr.num_cols, 6, dtype=torch.float64)
    assert_close("add", (a[:, None, :] + b[None, :, :])[row, col], sddmm(csr, a, b, "add", impl="reference"))
    assert_close("dot", (a @ b.T)[row, col], sddmm(csr, a, b, "dot", impl="reference"))
    a3, b3 = a.view(-1, 2, 3), b.view(-1, 2, 3)
    expected = torch.stack([(a3[:, h] @ b3[:, h].T)[row, col] for h in range(2)], 1)  # [nnz, 2]
    assert_close("dot heads", expected, sddmm(csr, a3, b3, "dot", impl="reference"))


@pytest.mark.triton
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name, width, dtype", CASES)
def test_triton_matches_reference(name, width, dtype, variant):
    csr = graph(name, DEVICE)
    op, heads = VARIANTS[variant]
    check(f"sddmm triton {variant}", lambda **t: sddmm(csr, op=op, impl="triton", **t),
          lambda **t: sddmm(csr, op=op, impl="reference", **t), _inputs(csr, width, DTYPES[dtype], heads, DEVICE),
          _terms(csr, width, op))


@pytest.mark.triton
@pytest.mark.parametrize("op", ["add", "dot"])
def test_triton_no_edges(op):
    csr = graph("no-edges", DEVICE)
    out = sddmm(csr, torch.randn(5, 3, device=DEVICE), torch.randn(7, 3, device=DEVICE), op, impl="triton")
    assert out.shape == ((0, 3) if op == "add" else (0,))


@pytest.mark.cuda
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37, 128, 512])
def test_cuda_large(width, dtype, variant):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, index_dtype=torch.int32, device="cuda")
    op, heads = VARIANTS[variant]
    check(f"sddmm cuda {variant}", lambda **t: sddmm(csr, op=op, impl="triton", **t),
          lambda **t: sddmm(csr, op=op, impl="reference", **t), _inputs(csr, width, DTYPES[dtype], heads, "cuda"),
          _terms(csr, width, op))
