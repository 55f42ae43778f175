"""CSR: construction from COO, cached row index and transpose, degree order, device moves."""

import pytest
import torch
from gnndist.kernels import CSR
from gnndist.kernels.testing import GRAPHS, dense, graph


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_from_coo_sorts_and_keeps_duplicates(index_dtype):
    row = torch.tensor([2, 0, 2, 0, 2], dtype=index_dtype)
    col = torch.tensor([1, 3, 0, 3, 1], dtype=index_dtype)
    csr = CSR.from_coo(row, col, 4, 5)
    assert csr.col.dtype == csr.rowptr.dtype == index_dtype
    assert csr.rowptr.tolist() == [0, 2, 2, 5, 5]
    assert csr.col.tolist() == [3, 3, 0, 1, 1]
    assert csr.row.tolist() == [0, 0, 2, 2, 2]
    assert (csr.n_rows, csr.num_cols, csr.nnz) == (4, 5, 5)
    assert csr.in_degree().tolist() == [2, 0, 3, 0]
    assert csr.out_degree().tolist() == [1, 2, 0, 2, 0]


@pytest.mark.parametrize("name", GRAPHS)
def test_transpose_and_perm(name):
    csr = graph(name)
    csr_t, perm = csr.transpose()
    assert csr_t.shape == (csr.num_cols, csr.n_rows) and csr_t.col.dtype == csr.col.dtype
    w = torch.randn(csr.nnz, dtype=torch.float64)
    assert torch.equal(dense(csr_t, w[perm]), dense(csr, w).T)
    assert torch.equal(csr.col[perm], csr_t.row) and torch.equal(csr.row[perm], csr_t.col)
    assert csr.transpose() is csr.transpose()  # cached
    back, perm_back = csr_t.transpose()
    assert back is csr and torch.equal(perm[perm_back], torch.arange(csr.nnz))


def test_row_order_is_by_decreasing_degree():
    csr = graph("power-law-int32")
    deg = csr.in_degree()[csr.row_order().long()]
    assert (deg[:-1] >= deg[1:]).all() and sorted(csr.row_order().tolist()) == list(range(csr.n_rows))


def test_to_same_device_is_identity_and_caches_travel():
    csr = graph("empty-rows-int64")
    assert csr.to("cpu") is csr
    csr.transpose()
    moved = csr.to(torch.device("meta"))
    assert moved.device.type == "meta" and moved._transpose is not None


@pytest.mark.parametrize("bad", ["mixed-dtype", "out-of-range"])
def test_invalid_input_is_rejected(bad):
    with pytest.raises(ValueError):
        if bad == "mixed-dtype":
            CSR(torch.tensor([0, 1]), torch.tensor([0], dtype=torch.int32), 1)
        else:
            CSR.from_coo(torch.tensor([0]), torch.tensor([4]), 1, 4)
