"""Every pass the partition pipeline runs on --threads threads gives the same arrays at 1, 2 and 3 threads and any
chunk size: the neighbour-part counts, the volume weights, the 1D loads, the report and the part files."""

import json

import numpy as np
import pytest
from gnndist.datasets import synthetic
from gnndist.partition import csr_from_edge_index, metis_assign, partition
from gnndist.partition.balance import derived_weights, rank_loads, volume_weights
from gnndist.partition.book import comm_volume
from gnndist.partition.counts import DenseCounts, SparseCounts, part_counts
from gnndist.partition.rank_times import unit_costs

from gnndist.cost import NETWORKS, model_widths

# (threads, chunk): chunks of 7 and 13 entries split a 600-node graph into ~400 and ~200 chunks
SPLITS = [(2, 7), (3, 13)]
IDS = [f"threads{t}-chunk{c}" for t, c in SPLITS]


@pytest.fixture(scope="module")
def graph():
    """A 600-node power-law-ish synthetic graph and METIS's 5 parts of it."""
    data = synthetic(600, avg_degree=8, num_classes=3, num_features=4, seed=4)
    csr = csr_from_edge_index(data.edge_index, 600)
    return csr, metis_assign(csr.rowptr, csr.col, 5, "cut", 0)


@pytest.mark.parametrize("threads,chunk", SPLITS, ids=IDS)
def test_neighbour_part_counts_do_not_depend_on_threads(graph, threads, chunk):
    csr, assign = graph
    dense = DenseCounts(csr, assign, 5)
    assert np.array_equal(DenseCounts(csr, assign, 5, threads, chunk).table, dense.table)
    one, many = SparseCounts(csr, assign, 5), part_counts(csr, assign, 5, True, threads, chunk)
    assert np.array_equal(many.keys, one.keys) and np.array_equal(many.vals, one.vals)
    assert np.array_equal(many.rows(np.arange(600)), dense.table)


@pytest.mark.parametrize("threads,chunk", SPLITS, ids=IDS)
def test_volume_weights_and_loads_do_not_depend_on_threads(graph, threads, chunk):
    csr, assign = graph
    unit = unit_costs(model_widths(4, 3), NETWORKS["ib"]).sum(0)
    want = derived_weights(csr, assign, 5, unit)
    got = derived_weights(csr, assign, 5, unit, threads, chunk)
    assert want.keys() == got.keys() == {"send", "recv", "time"}
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    assert volume_weights(csr, assign, 5, threads, chunk).keys() == {"send", "recv"}
    assert rank_loads(csr, assign, 5, threads, chunk) == rank_loads(csr, assign, 5)
    assert comm_volume(csr, assign, 5, threads, chunk) == comm_volume(csr, assign, 5)


def _timeless(report):
    """The report without what a run's timing and thread count set: stage seconds, the refinement's seconds."""
    if isinstance(report, dict):
        return {k: _timeless(v) for k, v in report.items() if k not in ("stages", "seconds", "assign_seconds",
                                                                          "threads_given")}
    if isinstance(report, list):
        return [_timeless(v) for v in report]
    return report


@pytest.mark.parametrize("threads,chunk", SPLITS, ids=IDS)
def test_the_refined_pipeline_does_not_depend_on_threads(tmp_path, threads, chunk):
    """METIS under auto's balance settings (derived weights, refinement, the random baseline's volume in the report):
    the same parts, report and part files at any thread count and chunk."""
    data = synthetic(600, avg_degree=8, num_classes=3, num_features=4, seed=4)
    want = partition(data, 3, method="metis", progress=False, threads=1)
    got = partition(data, 3, method="metis", progress=False, threads=threads, chunk=chunk)
    assert np.array_equal(got.book.assign, want.book.assign)
    assert got.report["refine"]["moved"] > 0  # the refinement ran and moved nodes
    assert _timeless(got.report) == _timeless(want.report)
    a = json.loads((want.save(tmp_path / "a", dataset="s", progress=False) / "META.json").read_text())
    b = json.loads((got.save(tmp_path / "b", dataset="s", progress=False) / "META.json").read_text())
    assert a["sha256"] == b["sha256"] and a["layouts"] == b["layouts"]
