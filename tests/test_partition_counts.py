"""Neighbour-part counts held sparse answer as the dense table does, and the refinement moves the same nodes."""

import numpy as np
import pytest
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index
from gnndist.partition.counts import DenseCounts, SparseCounts, part_counts
from gnndist.partition.metis import metis_assign, random_assign
from gnndist.partition.peers import Ledger
from gnndist.partition.refine import RefineSettings, refine

from gnndist.cost import NETWORKS


@pytest.fixture(scope="module")
def graph():
    data = synthetic(400, avg_degree=8, num_classes=3, num_features=4, seed=5)
    return csr_from_edge_index(data.edge_index, 400)


def _same(dense: DenseCounts, sparse: SparseCounts, assign: np.ndarray) -> None:
    n, parts = dense.n, dense.parts
    v = np.repeat(np.arange(n), parts)
    p = np.tile(np.arange(parts), n)
    assert np.array_equal(dense.get(v, p), sparse.get(v, p))
    assert all(np.array_equal(dense.row(k), sparse.row(k)) for k in (0, 7, n - 1))
    crit = np.array([1, parts - 1])
    for a, b in zip(dense.pairs_in(crit, assign), sparse.pairs_in(crit, assign)):
        assert np.array_equal(a, b)
    assert all(np.array_equal(dense.in_part(k), sparse.in_part(k)) for k in range(parts))
    assert np.array_equal(dense.send_pairs(assign), sparse.send_pairs(assign))
    assert np.array_equal(dense.rows(np.arange(0, n, 3)), sparse.rows(np.arange(0, n, 3)))
    assert np.array_equal(dense.nonzero_per_row(), sparse.nonzero_per_row())


def test_sparse_counts_follow_the_dense_table_through_moves(graph):
    parts = 5
    assign = random_assign(graph.num_nodes, parts, seed=1)
    dense, sparse = part_counts(graph, assign, parts, False), part_counts(graph, assign, parts, True)
    assert isinstance(dense, DenseCounts) and isinstance(sparse, SparseCounts)
    sparse.pending_max = 3  # merge often: the side table and the merges are both exercised
    rng = np.random.default_rng(0)
    book_d, book_s = Ledger(graph, assign.copy(), dense, np.ones((400, 1), dtype=np.int64)), None
    for step in range(60):
        nodes = rng.choice(graph.num_nodes, 4, replace=False)
        targets = rng.integers(0, parts, 4)
        keep = targets != assign[nodes]
        nodes, targets = nodes[keep], targets[keep]
        lo, hi = graph.rowptr[nodes], graph.rowptr[nodes + 1]
        u = np.concatenate([graph.col[a:b] for a, b in zip(lo, hi)]).astype(np.int64)
        src = np.repeat(assign[nodes], hi - lo)
        dst = np.repeat(targets, hi - lo)
        for c in (dense, sparse):
            c.move_neighbours(u, src, dst)
        assign[nodes] = targets
        if step % 20 == 0:
            _same(dense, sparse, assign)
    _same(dense, sparse, assign)
    assert np.array_equal(dense.table, DenseCounts(graph, assign, parts).table)
    # single-node moves of the peer pruning's bookkeeping, from the same start, agree cell for cell
    book_d = Ledger(graph, assign.copy(), DenseCounts(graph, assign, parts), np.ones((400, 1), dtype=np.int64))
    book_s = Ledger(graph, assign.copy(), SparseCounts(graph, assign, parts), np.ones((400, 1), dtype=np.int64))
    book_s.cnt.pending_max = 5
    for v, t in zip(rng.integers(0, 400, 150), rng.integers(0, parts, 150)):
        book_d.move(int(v), int(t))
        book_s.move(int(v), int(t))
    assert np.array_equal(book_d.pair, book_s.pair)
    _same(book_d.cnt, book_s.cnt, book_d.assign)


@pytest.mark.parametrize("n, degree, parts", [(300, 4, 16)])
def test_refinement_moves_the_same_nodes_with_sparse_counts(n, degree, parts):
    data = synthetic(n, avg_degree=degree, num_classes=3, num_features=4, seed=5)
    csr = csr_from_edge_index(data.edge_index, n)
    widths, net = (4, 16, 3), NETWORKS["ib"]
    start = metis_assign(csr.rowptr, csr.col, parts, "cut", 0)
    w = np.stack([np.ones(n, dtype=np.int64), csr.degree()], axis=1)
    tol = np.array([1.1, 1.5])
    runs = [refine(csr, start, parts, w, tol, RefineSettings(widths, net, sparse=s))
            for s in (False, True)]
    (a_dense, s_dense), (a_sparse, s_sparse) = runs
    assert np.array_equal(a_dense, a_sparse)
    assert s_dense["moved"] > 0 and s_dense["peers"]["moved"] > 0  # both the volume passes and the pruning moved
    assert (s_dense["counts"], s_sparse["counts"]) == ("DenseCounts", "SparseCounts")
    for key in ("passes", "moved", "comm_volume_after", "max_volume_after", "modelled_epoch_s_after", "peers"):
        assert s_dense[key] == s_sparse[key], key
