"""SpMM: reference against a dense product and PyG; torch.sparse and Triton against the reference."""

from gnndist.kernels.testing import use_interpreter

DEVICE = use_interpreter()  # before any Triton kernel is imported

import pytest
import torch
from gnndist.kernels import CSR, spmm
from gnndist.kernels.testing import (
    DTYPES,
    GRAPHS,
    WIDTHS,
    check,
    dense,
    graph,
    leaf,
    power_law_graph,
)
from torch_geometric.utils import scatter

from gnndist.testing import assert_close

CASES = [pytest.param(g, f, "fp32", id=f"{g}-F{f}-fp32") for g in GRAPHS for f in WIDTHS]
CASES += [pytest.param(g, 37, "bf16", id=f"{g}-F37-bf16") for g in GRAPHS]
VARIANTS = ["sum-weighted", "mean"]


def _inputs(csr, width, dtype, weighted, device):
    inputs = {"x": leaf((csr.num_cols, width), dtype, device, 0)}
    if weighted:
        inputs["edge_weight"] = leaf((csr.nnz,), dtype, device, 1)
    return inputs


def _terms(csr, width):
    """Terms per element: a row's edges (output), a column's edges (grad x), the features (grad w)."""
    return {"out": csr.in_degree(), "x": csr.out_degree(), "edge_weight": width}


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("name", GRAPHS)
def test_reference_matches_dense(name, reduce):
    csr = graph(name)
    x = leaf((csr.num_cols, 5), torch.float64, "cpu", 0)
    w = leaf((csr.nnz,), torch.float64, "cpu", 1)
    expected = dense(csr, w) @ x  # [n_rows, 5]
    if reduce == "mean":
        expected = expected / csr.in_degree().clamp(min=1).unsqueeze(1)
    assert_close("spmm", expected, spmm(csr, x, w, reduce, impl="reference"), 1e-12)


@pytest.mark.parametrize("impl", ["reference", "sparse"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_gradcheck(reduce, impl):
    csr = graph("empty-rows-int64")
    x = leaf((csr.num_cols, 3), torch.float64, "cpu", 0)
    w = leaf((csr.nnz,), torch.float64, "cpu", 1)
    assert torch.autograd.gradcheck(lambda x, w: spmm(csr, x, w, reduce, impl=impl), (x, w), fast_mode=True)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_reference_matches_pyg_scatter(reduce):
    csr = graph("power-law-int32")
    x = torch.randn(csr.num_cols, 8)
    expected = scatter(x[csr.col.long()], csr.row.long(), 0, dim_size=csr.n_rows, reduce=reduce)
    assert_close("spmm", expected, spmm(csr, x, reduce=reduce, impl="reference"))


def test_reference_per_head_weights_match_dense():
    csr = graph("empty-rows-int64")
    x = torch.randn(csr.num_cols, 3, 4, dtype=torch.float64)
    w = torch.randn(csr.nnz, 3, dtype=torch.float64)
    expected = torch.stack([dense(csr, w[:, h]) @ x[:, h] for h in range(3)], 1)  # [n_rows, 3, 4]
    assert_close("spmm per head", expected, spmm(csr, x, w, impl="reference"), 1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name, width, dtype", [c for c in CASES if c.values[2] == "fp32"])
def test_sparse_matches_reference(name, width, dtype, variant):
    csr = graph(name)
    reduce, weighted = variant.split("-")[0], variant.endswith("weighted")
    check(f"spmm sparse {variant}", lambda **t: spmm(csr, reduce=reduce, impl="sparse", **t),
          lambda **t: spmm(csr, reduce=reduce, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], weighted, "cpu"), _terms(csr, width))


@pytest.mark.triton
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name, width, dtype", CASES)
def test_triton_matches_reference(name, width, dtype, variant):
    csr = graph(name, DEVICE)
    reduce, weighted = variant.split("-")[0], variant.endswith("weighted")
    check(f"spmm triton {variant}", lambda **t: spmm(csr, reduce=reduce, impl="triton", **t),
          lambda **t: spmm(csr, reduce=reduce, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], weighted, DEVICE), _terms(csr, width))


@pytest.mark.triton
def test_triton_per_head_weights():
    csr = graph("power-law-int32", DEVICE)
    inputs = {"x": leaf((csr.num_cols, 2, 9), torch.float32, DEVICE, 0),
              "edge_weight": leaf((csr.nnz, 2), torch.float32, DEVICE, 1)}
    check("spmm triton per head", lambda **t: spmm(csr, impl="triton", **t),
          lambda **t: spmm(csr, impl="reference", **t), inputs, _terms(csr, 9))


def _long_row_graph():
    """Row 0 has 2000 edges, rows 1-3 one each."""
    row = torch.cat([torch.zeros(2000, dtype=torch.int64), torch.arange(1, 4)])
    col = torch.cat([torch.arange(2000) % 500, torch.arange(3)])
    return CSR.from_coo(row, col, 4, 500)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_check_catches_a_dropped_edge_on_a_long_row(dtype):
    csr = _long_row_graph()
    keep = torch.ones(csr.nnz, dtype=torch.bool)
    keep[1234] = False  # one edge of row 0
    dropped = CSR.from_coo(csr.row[keep], csr.col[keep], csr.n_rows, csr.num_cols)
    inputs = {"x": leaf((csr.num_cols, 37), DTYPES[dtype], "cpu", 0)}
    check("spmm long row", lambda **t: spmm(csr, impl="reference", **t),
          lambda **t: spmm(csr, impl="reference", **t), inputs, _terms(csr, 37))
    with pytest.raises(AssertionError, match=r"output: \d+ of .* worst at \(0, "):
        check("spmm one edge dropped", lambda **t: spmm(dropped, impl="reference", **t),
              lambda **t: spmm(csr, impl="reference", **t), inputs, _terms(csr, 37))


def test_check_catches_a_100_ulp_error():
    csr = _long_row_graph()
    inputs = {"x": leaf((csr.num_cols, 37), torch.float32, "cpu", 0)}

    def perturbed(**t):
        out = spmm(csr, impl="reference", **t)
        bump = torch.zeros_like(out)
        bump[2, 5] = 100 * torch.finfo(torch.float32).eps / 2 * out[2, 5].detach().abs()  # 100 ulp, a 1-edge row
        return out + bump

    with pytest.raises(AssertionError, match=r"output: 1 of .* worst at \(2, 5\)"):
        check("spmm 100 ulp off", perturbed, lambda **t: spmm(csr, impl="reference", **t), inputs, _terms(csr, 37))


@pytest.mark.parametrize("blocked", [False, True], ids=["one-block", "row-blocks"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("width", [1, 16, 37, 128])
def test_sparse_half_in_column_chunks_is_the_whole_product(monkeypatch, width, dtype, blocked):
    """The sparse path multiplies half rows in fp32 16 columns at a time (a bounded transient), each chunk for
    every block of rows: bit for bit the product of the whole fp32 copy, rounded once, forward and backward."""
    from gnndist.kernels.spmm import sparse
    from gnndist.kernels.spmm.sparse import edge_values, sparse_matrix

    if blocked:
        monkeypatch.setattr(sparse, "BLOCK_ENTRIES", 16)
    csr = graph("power-law-int32")
    assert (len(sparse.row_blocks(csr, torch.ones(csr.nnz))) >= 4) == blocked
    x = leaf((csr.num_cols, width), {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype], "cpu", 0)
    out = spmm(csr, x, impl="sparse")
    whole = torch.sparse.mm(sparse_matrix(csr, edge_values(csr, None, "sum", torch.float32)), x.detach().float())
    assert out.dtype == x.dtype and torch.equal(out, whole.to(x.dtype))
    grad = torch.randn(csr.n_rows, width).to(x.dtype)
    out.backward(grad)
    t = csr.transposed()
    whole_t = torch.sparse.mm(sparse_matrix(t, edge_values(t, None, "sum", torch.float32)), grad.float())
    assert torch.equal(x.grad, whole_t.to(x.dtype))


@pytest.mark.parametrize("impl", ["reference", "sparse", pytest.param("triton", marks=pytest.mark.triton)])
def test_no_edges_gives_zeros(impl):
    device = DEVICE if impl == "triton" else "cpu"
    csr = graph("no-edges", device)
    x = leaf((csr.num_cols, 4), torch.float32, device, 0)
    for reduce in ("sum", "mean"):
        out = spmm(csr, x, reduce=reduce, impl=impl)
        assert out.shape == (5, 4) and not out.any()


@pytest.mark.cuda
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("width", [1, 37, 128, 512])
def test_cuda_large(width, dtype, variant):
    csr = power_law_graph(30_000, 40_000, 12.0, seed=3, empty_fraction=0.05, index_dtype=torch.int32, device="cuda")
    reduce, weighted = variant.split("-")[0], variant.endswith("weighted")
    check(f"spmm cuda {variant}", lambda **t: spmm(csr, reduce=reduce, impl="triton", **t),
          lambda **t: spmm(csr, reduce=reduce, impl="reference", **t),
          _inputs(csr, width, DTYPES[dtype], weighted, "cuda"), _terms(csr, width))


@pytest.mark.triton
@pytest.mark.parametrize("name", GRAPHS)
def test_triton_int64_offsets_equal_int32(name):
    """The int64-offset specialisation (graphs with rows * F >= 2**31) sums exactly like the int32 one."""
    from gnndist.kernels.spmm.triton_kernel import spmm_launch

    csr = graph(name, DEVICE)
    x = torch.randn(csr.num_cols, 37, device=DEVICE)
    w = torch.randn(csr.nnz, device=DEVICE)
    for kw in ({}, {"weight": w}, {"mean": True}):
        assert torch.equal(spmm_launch(csr, x, wide=True, **kw), spmm_launch(csr, x, wide=False, **kw))


@pytest.mark.parametrize("variant", ["sum", "mean", "weighted"])
def test_sparse_row_blocks_equal_the_whole_matrix_bit_for_bit(monkeypatch, variant):
    """Above BLOCK_ENTRIES the CPU path multiplies blocks of whole rows: the same numbers, forward and backward."""
    from gnndist.kernels.spmm import sparse

    csr = graph("power-law-int32")
    reduce = "mean" if variant == "mean" else "sum"
    w = torch.rand(csr.nnz, requires_grad=True) if variant == "weighted" else None

    def run():
        x = torch.randn(csr.num_cols, 5, generator=torch.Generator().manual_seed(0)).requires_grad_()
        out = spmm(CSR(csr.rowptr, csr.col, csr.n_rows, csr.num_cols), x, w, reduce, impl="sparse")  # a fresh cache
        out.backward(torch.ones_like(out))
        return out.detach(), x.grad, None if w is None else w.grad.clone()

    whole = run()
    if w is not None:
        w.grad = None
    monkeypatch.setattr(sparse, "BLOCK_ENTRIES", 16)
    assert len(sparse.row_blocks(csr, torch.ones(csr.nnz))) >= 4
    blocked = run()
    for a, b in zip(whole, blocked):
        assert (a is None and b is None) or torch.equal(a, b)
