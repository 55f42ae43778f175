"""What a rank keeps per adjacency entry: int32 indices, no transpose of a symmetric block, a mapped part.

Structure, not timing: the loaded part's arrays are memory-mapped (the features are the file's
pages), the layout's CSRs are int32 and nothing per entry is cached on the interior block by a
GCN step, the boundary's backward uses its transposed pattern alone, the results equal a dense
one-process reference, and the run's summary carries every rank's measured peak memory.
"""

import numpy as np
import pytest
import torch
from gnndist.kernels import CSR, spmm
from gnndist.partition import partition, read_part

from gnndist.config import ModelConfig, OptimConfig, RunConfig, TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.strategies.structure import split_columns
from gnndist.testing import QUICK_PARTITION, assert_close
from gnndist.training.trainer import Trainer


def _saved(tmp_path_factory, parts: int):
    """A ``parts``-part partition of one small synthetic graph."""
    from gnndist.datasets import synthetic

    data = synthetic(300, avg_degree=6, num_classes=3, num_features=7, seed=5)
    out = tmp_path_factory.mktemp("floor") / f"p{parts}"
    partition(data, parts, **QUICK_PARTITION).save(out, dataset="floor", progress=False)
    return out


@pytest.fixture(scope="module")
def part1(tmp_path_factory):
    """A one-part partition (the solo grid loads it)."""
    return _saved(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def part2(tmp_path_factory):
    return _saved(tmp_path_factory, 2)


def _dense(graph) -> torch.Tensor:
    """The rank's rows of A, dense, from the stored part (int64 as written). ``[n_owned, n_owned + n_halo]``."""
    rowptr, col = np.asarray(graph.structure.rowptr), np.asarray(graph.structure.col)
    a = torch.zeros(graph.n_owned, graph.n_owned + graph.n_halo, dtype=torch.float64)
    rows = np.repeat(np.arange(graph.n_owned), np.diff(rowptr))
    a[torch.from_numpy(rows), torch.from_numpy(col)] = 1.0
    return a


def test_part_arrays_are_memory_mapped(part2):
    arrays = read_part(part2, 1)
    for name, arr in arrays.items():
        assert isinstance(arr, np.memmap), f"{name} was read into memory, not mapped"
        assert not arr.flags.writeable, f"{name} is writable: a part is read-only"


def test_graph_features_are_the_part_pages(part1):
    from gnndist.partition import read_meta

    arrays = read_part(part1, 0)
    graph = DistGraph(arrays, read_meta(part1))  # no normalisation: x is the stored rows
    assert graph.x.data_ptr() == arrays["x"].ctypes.data, "the features were copied at load"
    assert graph.y.data_ptr() == arrays["y"].ctypes.data


def test_layout_csrs_are_int32_and_interior_is_its_own_transpose(part1):
    from gnndist.partition import read_meta

    graph = DistGraph(read_part(part1, 0), read_meta(part1))
    block = graph.strategy.block
    for csr in (block.csr_int, block.csr_bnd, graph.csr):
        assert csr.col.dtype == torch.int32 and csr.rowptr.dtype == torch.int32, csr
    assert block.csr_int.symmetric, "the 1d interior block of a symmetrised graph is symmetric"
    x = torch.randn(graph.n_owned, 4, dtype=torch.float32, requires_grad=True)
    graph.spmm(x, weight="gcn").sum().backward()
    c = block.csr_int
    assert c._transpose is None and c._transposed is None, "a transposed copy was built for a symmetric block"
    assert c._row is None, "a row index per entry was cached by a GCN step"
    assert c.transposed() is c


def test_spmm_equals_dense_reference_with_int32(part1):
    from gnndist.partition import read_meta

    graph = DistGraph(read_part(part1, 0), read_meta(part1))
    a = _dense(graph)
    deg = a.sum(1)
    dinv = (graph.degree[: graph.n_owned].double() + 1).rsqrt()
    x = torch.sin(torch.arange(graph.n_owned * 5, dtype=torch.float64).view(-1, 5)).float().requires_grad_()
    g = torch.cos(torch.arange(graph.n_owned * 5, dtype=torch.float64).view(-1, 5))
    for weight, reduce, ref_op in (
        (None, "sum", a),
        (None, "mean", a / deg.clamp(min=1)[:, None]),
        ("gcn", "sum", dinv[:, None] * (a + torch.eye(graph.n_owned)) * dinv[None, :]),
    ):
        x.grad = None
        out = graph.spmm(x, weight=weight, reduce=reduce)
        (out.double() * g).sum().backward()
        xd = x.detach().double()
        assert_close(f"{weight} {reduce}", ref_op @ xd, out.double(), rtol=1e-5)
        assert_close(f"grad {weight} {reduce}", ref_op.T @ g, x.grad.double(), rtol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_rectangular_backward_uses_the_transposed_pattern(reduce):
    torch.manual_seed(0)
    n, m, nnz = 37, 23, 150
    csr = CSR.from_coo(torch.randint(0, n, (nnz,)), torch.randint(0, m, (nnz,), dtype=torch.int32), n, m)
    assert csr.col.dtype == torch.int32
    x = torch.randn(m, 6, dtype=torch.float64, requires_grad=True)
    out = spmm(csr, x, reduce=reduce, impl="sparse")
    g = torch.randn_like(out)
    out.backward(g)
    dense = torch.zeros(n, m, dtype=torch.float64).index_put_((csr.row.long(), csr.col.long()),
                                                              torch.ones(nnz, dtype=torch.float64), accumulate=True)
    if reduce == "mean":
        dense = dense / dense.sum(1, keepdim=True).clamp(min=1)
    assert_close("grad", dense.T @ g, x.grad, rtol=1e-10)
    assert csr._transpose is None, "an unweighted backward built the transpose with its permutation"
    t = csr.transposed()
    ref_t, _ = CSR(csr.rowptr, csr.col, m).transpose()
    assert torch.equal(t.rowptr, ref_t.rowptr) and torch.equal(t.col, ref_t.col)
    assert t.col.dtype == torch.int32


def test_split_sorts_rows_not_in_order():
    rowptr = np.array([0, 3, 5])
    col = np.array([4, 1, 0, 5, 1])  # row 0: interior 1, 0 (descending), boundary 4; row 1: 1, then 5
    interior, boundary = split_columns(rowptr, col, n_owned=3, n_halo=3)
    assert interior.col.tolist() == [0, 1, 1] and interior.rowptr.tolist() == [0, 2, 3]
    assert boundary.col.tolist() == [1, 2] and boundary.rowptr.tolist() == [0, 1, 2]
    in_order, _ = split_columns(rowptr, np.array([4, 0, 1, 1, 5]), n_owned=3, n_halo=3)
    assert in_order.col.tolist() == [0, 1, 1]


def test_summary_has_every_rank_peak_memory(part1):
    graph = DistGraph.load(part1, ProcessGrid())
    cfg = TrainConfig(model=ModelConfig(hidden=8), optim=OptimConfig(epochs=1), run=RunConfig(progress=False))
    summary = Trainer(graph, cfg).fit().to_dict()
    peaks = [r["peak_memory_bytes"] for r in summary["per_rank"]]
    assert len(peaks) == 1 and peaks[0] > 0


def test_simulate_predicts_every_rank_peak_of_the_layout():
    from gnndist.datasets import synthetic

    from gnndist.parts.memory import INDEX_BYTES, INTERPRETER_BYTES, training_peak
    from gnndist.parts.simulate import grid_loads, simulate_partition

    data = synthetic(200, avg_degree=5, num_classes=3, num_features=6, seed=2)
    p = partition(data, 4, **QUICK_PARTITION)
    recs = {r["strategy"]: r for r in simulate_partition(p.csr, p.book.offsets, feature_dim=8, layers=2)}
    one = recs["1d"]["peak_memory_per_rank"]
    assert len(one) == 4 and min(one) > INTERPRETER_BYTES
    assert recs["1d-oblivious"]["peak_memory_per_rank"] is None
    # 1d keeps the boundary's transposed pattern alone; a grid layout every entry's: 4 B more per interior entry
    lo, hi = p.book.offsets[0], p.book.offsets[1]
    rows = np.repeat(np.arange(p.csr.num_nodes), np.diff(p.csr.rowptr))
    mine = (rows >= lo) & (rows < hi)
    nnz, bnd = int(mine.sum()), int((mine & ((p.csr.col < lo) | (p.csr.col >= hi))).sum())
    ld = grid_loads(p.csr, p.book.offsets, 1)[0]
    assert ld.nnz == nnz
    assert one[0] == training_peak(nnz, bnd, ld.rows, ld.expand_recv, ld.expand_send, [8, 8, 8])
    assert training_peak(nnz, nnz, 0, 0, 0, [8]) - training_peak(nnz, bnd, 0, 0, 0, [8]) == INDEX_BYTES * (nnz - bnd)
