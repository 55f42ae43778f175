"""Partition invariants, plans, determinism, on-disk format and edge cases."""

import json

import numpy as np
import pytest
import torch
from gnndist.datasets import load, synthetic
from gnndist.partition import csr_from_edge_index, partition, read_meta
from gnndist.partition import load as load_part
from gnndist.partition.format import write_partition
from torch_geometric.data import Data

from gnndist.cli import main
from gnndist.errors import UserError
from gnndist.testing import assert_close


def _graph(n=300, seed=0, isolated=5):
    """A small random graph with self-loops, duplicate edges and isolated nodes in the input."""
    g = torch.Generator().manual_seed(seed)
    m = n * 4
    src = torch.randint(0, n - isolated, (m,), generator=g)
    dst = torch.randint(0, n - isolated, (m,), generator=g)
    ei = torch.stack([torch.cat([src, src[:20], torch.arange(10)]), torch.cat([dst, dst[:20], torch.arange(10)])])
    x = torch.randn(n, 7, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    train[:40] = True
    return Data(x=x, y=y, edge_index=ei, train_mask=train, val_mask=~train, test_mask=~train, num_nodes=n)


def _dense_adj(data):
    n = data.num_nodes
    a = torch.zeros(n, n, dtype=torch.float64)
    ei = data.edge_index
    keep = ei[0] != ei[1]
    a[ei[1, keep], ei[0, keep]] = 1.0
    a[ei[0, keep], ei[1, keep]] = 1.0
    return a


def _local_adj(lp):
    n_local = lp.n_owned + lp.n_halo
    rows = np.repeat(np.arange(lp.n_owned), np.diff(lp.rowptr))
    a = torch.zeros(lp.n_owned, n_local, dtype=torch.float64)
    a[torch.from_numpy(rows), torch.from_numpy(lp.col)] = 1.0
    return a


@pytest.mark.parametrize("parts", [1, 2, 4, 7])
@pytest.mark.parametrize("method", ["metis", "random"])
def test_invariants(parts, method):
    data = _graph()
    p = partition(data, parts, method=method)
    book = p.book
    n = data.num_nodes
    # every node owned exactly once, contiguous ranges
    assert np.array_equal(np.sort(book.new2old), np.arange(n))
    assert book.offsets[0] == 0 and book.offsets[-1] == n
    assert np.all(book.assign[book.new2old] == np.repeat(np.arange(parts), np.diff(book.offsets)))

    locals_ = list(p.local_parts())
    x_new = data.x.double()[torch.from_numpy(book.new2old)]
    adj = _dense_adj(data)[book.new2old][:, book.new2old]
    halo_total = 0
    for lp in locals_:
        lo, hi = book.offsets[lp.rank], book.offsets[lp.rank + 1]
        # halo grouped by owner, in the order the owners send it
        received = []
        for j, other in enumerate(locals_):
            start = other.send_counts[: lp.rank].sum()
            idx = other.send_idx[start : start + other.send_counts[lp.rank]]
            received.append(x_new[book.offsets[j] + torch.from_numpy(idx)])
            assert other.send_counts[lp.rank] == lp.recv_counts[j]
        received = torch.cat(received)
        assert_close("halo rows", x_new[torch.from_numpy(lp.halo_gid)], received, rtol=0)
        assert not np.any((lp.halo_gid >= lo) & (lp.halo_gid < hi))
        # local CSR times local features equals the global product's owned rows
        x_local = torch.cat([x_new[lo:hi], received])
        assert_close("local spmm", adj[lo:hi] @ x_new, _local_adj(lp) @ x_local, rtol=1e-12)
        # original ids and global degrees
        ids_new = np.concatenate([np.arange(lo, hi), lp.halo_gid])
        assert np.array_equal(lp.orig_id, book.new2old[ids_new])
        assert np.array_equal(lp.degree, adj.sum(1).long().numpy()[ids_new])
        halo_total += lp.n_halo
    assert p.report["comm_volume"] == halo_total
    assert p.report["num_edges"] == int(adj.sum().item() // 2)


def test_cleaning_drops_self_loops_and_duplicates():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 1, 3, 3, 3]])
    csr = csr_from_edge_index(ei, 5)
    assert csr.rowptr.tolist() == [0, 1, 2, 3, 4, 4]  # node 4 isolated
    assert csr.col.tolist() == [1, 0, 3, 2]


def test_deterministic_and_seeded():
    data = _graph(seed=3)
    a = partition(data, 4, seed=5).book.assign
    b = partition(data, 4, seed=5).book.assign
    assert np.array_equal(a, b)
    r1 = partition(data, 4, method="random", seed=1).book.assign
    r2 = partition(data, 4, method="random", seed=2).book.assign
    assert not np.array_equal(r1, r2)


def test_metis_beats_random_on_cora():
    data = load("cora")
    rep = partition(data, 4).report
    assert rep["comm_volume"] <= 0.2 * rep["random_comm_volume"]
    assert rep["imbalance"]["nodes"] < 1.1  # auto does not balance training nodes (the model ignores them) ...
    train = partition(data, 4, balance="nodes,edges,train").report  # ... but the train constraint does
    assert train["imbalance"]["train"] < 1.05 and train["comm_volume"] <= 0.2 * train["random_comm_volume"]
    cut = partition(data, 4, objective="cut").report
    assert cut["edge_cut"] < rep["random_comm_volume"]


def test_part_without_training_nodes_and_isolated():
    data = _graph(n=60, isolated=10)
    data.train_mask[:] = False
    data.train_mask[0] = True
    p = partition(data, 4, method="random")
    counts = [int(arr["train_mask"].sum()) for arr in p.part_arrays()]
    assert sum(counts) == 1 and counts.count(0) == 3


def test_bad_inputs():
    data = _graph(n=20, isolated=0)
    with pytest.raises(UserError, match="exceeds the number of nodes"):
        partition(data, 21)
    with pytest.raises(UserError, match="--method"):
        partition(data, 2, method="spectral")
    with pytest.raises(UserError, match="--objective"):
        partition(data, 2, objective="speed")
    bad = Data(x=data.x, y=data.y, edge_index=torch.tensor([[0], [25]]), num_nodes=20)
    with pytest.raises(UserError, match="edge ids"):
        partition(bad, 2)


def test_save_load_roundtrip_and_checksums(tmp_path):
    data = _graph()
    p = partition(data, 3)
    out = p.save(tmp_path / "g3", dataset="toy")
    meta = read_meta(out)
    assert meta["parts"] == 3 and meta["N"] == data.num_nodes and meta["F"] == 7
    for k, expected in enumerate(p.part_arrays()):
        arrays, _ = load_part(out, k)
        assert set(arrays) == set(expected)
        for name in expected:
            assert np.array_equal(arrays[name], expected[name]), name
    # corrupt one file: loading that part names it; other parts still load
    victim = out / "part-1" / "col.npy"
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="part-1/col.npy"):
        load_part(out, 1)
    load_part(out, 0)
    with pytest.raises(UserError, match="part 3 does not exist"):
        load_part(out, 3)


def test_interrupted_write_leaves_nothing(tmp_path):
    def parts():
        yield {"a": np.zeros(3)}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_partition(tmp_path / "p", {"parts": 2}, parts())
    assert list(tmp_path.iterdir()) == []


def test_synthetic_partition():
    data = synthetic(2000, avg_degree=8, num_classes=4, num_features=8, seed=0)
    rep = partition(data, 4).report
    assert rep["comm_volume"] < rep["random_comm_volume"]


def test_cli_partition_json_and_info(tmp_path, capsys):
    out = tmp_path / "cora4"
    assert main(["partition", "cora", "--parts", "4", "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("parts", "method", "objective", "edge_cut", "comm_volume", "max_send_volume",
                "max_recv_volume", "halo_fraction", "imbalance"):
        assert key in rep
    assert rep["parts"] == 4 and len(rep["halo_fraction"]) == 4
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["comm_volume"] == rep["comm_volume"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["partition", "no-such-graph", "--parts", "2"], "unknown dataset"),
        (["partition", "cora", "--parts", "100000"], "exceeds the number of nodes"),
        (["partition", "cora", "--parts", "0"], "--parts must be >= 1"),
        (["info", "/nonexistent/dir"], "not a gnndist partition directory"),
    ],
    ids=["unknown-name", "too-many-parts", "zero-parts", "missing-dir"],
)
def test_cli_errors_exit_2(argv, message, tmp_path, capsys):
    assert main(argv + (["--out", str(tmp_path / "o")] if argv[0] == "partition" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_clean_input_fast_path_matches_general_path():
    data = synthetic(500, avg_degree=6, num_classes=3, num_features=4, seed=9)  # already clean and sorted
    fast = csr_from_edge_index(data.edge_index, 500)
    shuffled = data.edge_index[:, torch.randperm(data.edge_index.shape[1], generator=torch.Generator().manual_seed(0))]
    general = csr_from_edge_index(shuffled, 500)
    assert np.array_equal(fast.rowptr, general.rowptr) and np.array_equal(fast.col, general.col)
    one_way = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]  # sorted but not symmetric
    assert np.array_equal(csr_from_edge_index(one_way, 500).col, general.col)


@pytest.mark.parametrize("n, size", [(5000, 1000), (10, 1 << 20)], ids=["bitmap", "sort"])
def test_unique_ids_both_paths(n, size):
    from gnndist.partition.book import unique_ids

    ids = np.random.default_rng(0).integers(0, size, n)
    assert np.array_equal(unique_ids(ids, size), np.unique(ids))


def test_the_pipeline_reports_each_named_stage_with_its_time_and_peak():
    from gnndist.partition import STAGES, format_report

    p = partition(synthetic(300, avg_degree=5, num_classes=3, num_features=4, seed=1), 3, progress=False)
    stages = p.report["stages"]
    assert [st["stage"] for st in stages] == list(STAGES) == ["symmetrise", "assign", "plans", "renumber"]
    assert all(st["seconds"] >= 0 for st in stages)
    peaks = [st["peak_bytes"] for st in stages]
    assert peaks == sorted(peaks) and peaks[0] > 10 * 2**20  # a high-water mark: the interpreter at least
    assert "  stages           symmetrise " in format_report(p.report)


def test_a_report_from_an_older_gnndist_prints_one_line():
    from gnndist.partition import REPORT_VERSION, format_report

    p = partition(synthetic(300, avg_degree=5, num_classes=3, num_features=4, seed=1), 3, progress=False)
    assert p.report["report_version"] == REPORT_VERSION and len(format_report(p.report).splitlines()) > 10
    old = {k: v for k, v in p.report.items() if k not in ("report_version", "stages", "deterministic")}
    assert format_report(old) == ("partition: 3 parts, method auto: made by an older gnndist; "
                                  "re-partition for the full report")
