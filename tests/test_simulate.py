"""``gnndist simulate``: grid loads against a brute-force reading of the definitions, the 1D
halo against the partition's own volumes, conservation, records, ``--precision`` and the CLI."""

import json

import numpy as np
import pytest
from gnndist.datasets import synthetic
from gnndist.partition import partition
from gnndist.partition.book import csr_from_edge_index, halo_volumes
from gnndist.partition.layouts import layout_counts

from gnndist.cli import main
from gnndist.parts.memory import ACTIVATION_BYTES, activation_phases, training_peak
from gnndist.parts.simulate import RECORD_KEYS, grid_exchange, grid_loads, layouts, simulate_partition

F, LAYERS = 16, 2


@pytest.fixture(scope="module")
def data():
    return synthetic(120, avg_degree=6, num_classes=3, num_features=4, seed=3)


@pytest.fixture(scope="module")
def parts(data):
    return {P: partition(data, P, progress=False) for P in (4, 8, 16)}


def brute_loads(csr, off, c):
    """The layout definitions with Python sets: one tuple per rank in RankLoad field order."""
    P = len(off) - 1
    owner = [int(np.searchsorted(off, v, side="right") - 1) for v in range(csr.num_nodes)]
    expand, fold, nnz = set(), set(), [0] * P
    for r, col in zip(csr.rows().tolist(), csr.col.tolist()):
        blk = (owner[r] // c) * c + owner[col] % c
        nnz[blk] += 1
        if owner[col] != blk:
            expand.add((blk, col))  # blk receives input row col from its owner
        if owner[r] != blk:
            fold.add((blk, r))  # blk sends partial output row r to its owner
    out = []
    for k in range(P):
        e_send = {(b, v) for b, v in expand if owner[v] == k}
        e_recv = {(b, v) for b, v in expand if b == k}
        f_send = {(b, v) for b, v in fold if b == k}
        f_recv = {(b, v) for b, v in fold if owner[v] == k}
        messages = (max(len({b for b, _ in e_send}), len({owner[v] for _, v in e_recv}))
                    + max(len({owner[v] for _, v in f_send}), len({b for b, _ in f_recv})))
        out.append((len(e_send), len(e_recv), len(f_send), len(f_recv), messages, nnz[k], int(off[k + 1] - off[k]),
                    1 if c == 1 else 2))  # collective calls: the expand, and the fold on a grid
    return out


@pytest.mark.parametrize("P,c", [(4, 1), (4, 2), (4, 4), (8, 2), (8, 4), (16, 4)], ids=lambda v: str(v))
def test_grid_loads_match_brute_force(parts, P, c):
    p = parts[P]
    got = [tuple(ld.as_array()[:8].tolist()) for ld in grid_loads(p.csr, p.book.offsets, c)]
    assert got == brute_loads(p.csr, p.book.offsets, c)
    # each pair of ranks: the rows one receives from the other in the expand, sends to it in the fold
    csr, off = p.csr, p.book.offsets
    owner = np.searchsorted(off, np.arange(csr.num_nodes), side="right") - 1
    expand, fold = set(), set()
    for r, col in zip(csr.rows().tolist(), csr.col.tolist()):
        blk = (owner[r] // c) * c + owner[col] % c
        if owner[col] != blk:
            expand.add((blk, col))
        if owner[r] != blk:
            fold.add((blk, r))
    want_e, want_f = np.zeros((P, P), dtype=np.int64), np.zeros((P, P), dtype=np.int64)
    for b, v in expand:
        want_e[b, owner[v]] += 1
    for b, v in fold:
        want_f[b, owner[v]] += 1
    ex = grid_exchange(csr, off, c)
    assert np.array_equal(ex.expand, want_e) and np.array_equal(ex.fold, want_f)
    counts = layout_counts(csr, off)  # what the partition stores: the layouts auto considers
    if str(c) in counts.loads:
        k = list(counts.loads).index(str(c))
        assert np.array_equal(counts.pairs[k, 0], want_e) and np.array_equal(counts.pairs[k, 1], want_f)
        assert np.array_equal(counts.part_pairs(1), counts.pairs[:, :, 1, :])


@pytest.mark.parametrize("c", [1, 2, 4])
def test_grid_loads_with_empty_parts(parts, c):
    csr = parts[4].csr
    off = np.array([0, 30, 30, 30, 75, 75, 90, 120, 120])  # 8 parts, three of them empty
    got = [tuple(ld.as_array()[:8].tolist()) for ld in grid_loads(csr, off, c)]
    assert got == brute_loads(csr, off, c)


@pytest.mark.parametrize("P", [4, 8, 16])
def test_1d_expand_is_the_partition_halo(data, parts, P):
    p = parts[P]
    loads = grid_loads(p.csr, p.book.offsets, 1)
    recv, send = halo_volumes(csr_from_edge_index(data.edge_index, data.num_nodes), p.book.assign, P)
    assert [ld.expand_recv for ld in loads] == recv.tolist()
    assert [ld.expand_send for ld in loads] == send.tolist()
    assert sum(ld.expand_recv for ld in loads) == p.report["comm_volume"]
    assert max(ld.expand_recv for ld in loads) == p.report["max_recv_volume"]
    assert all(ld.fold_send == ld.fold_recv == 0 for ld in loads)


@pytest.mark.parametrize("P,c", [(4, 2), (8, 2), (8, 4), (16, 4), (16, 8)], ids=lambda v: str(v))
def test_sent_equals_received(parts, P, c):
    p = parts[P]
    ex = grid_exchange(p.csr, p.book.offsets, c)
    loads = ex.loads()
    assert sum(ld.expand_send for ld in loads) == sum(ld.expand_recv for ld in loads) == ex.expand.sum()
    assert sum(ld.fold_send for ld in loads) == sum(ld.fold_recv for ld in loads) == ex.fold.sum()
    assert sum(ld.nnz for ld in loads) == p.csr.nnz
    for lay in layouts(p.csr, p.book.offsets, F, (2, 4, 8)):
        assert lay.sent.sum() == lay.received.sum(), lay.strategy


def test_1d_oblivious_is_an_all_gather(parts):
    p = parts[8]
    n = np.diff(p.book.offsets)
    rec = next(r for r in simulate_partition(p.csr, p.book.offsets, F, LAYERS) if r["strategy"] == "1d-oblivious")
    N = int(n.sum())
    assert rec["max_received"] == LAYERS * 2 * 4 * F * int((N - n).max())
    assert rec["max_sent"] == LAYERS * 2 * 4 * F * int((N - np.roll(n, -1)).max())
    assert rec["max_messages"] == 7


@pytest.mark.parametrize("P", [4, 8, 16])
def test_records(parts, P):
    p = parts[P]
    recs = simulate_partition(p.csr, p.book.offsets, F, LAYERS, replication=(2, 4, 8))
    for r in recs:
        assert set(RECORD_KEYS) <= set(r)
        assert r["parts"] == P and r["feature_dim"] == F and r["layers"] == LAYERS
        assert r["max_bytes_per_rank"] == max(r["max_sent"], r["max_received"])
        assert r["model_time_s"] > 0 and r["memory_per_rank"] > 0
    names = {(r["strategy"], r["replication"]) for r in recs}
    cs = [c for c in (2, 4, 8) if c < P and P % c == 0]
    expected = {("1d", 1), ("1d-oblivious", 1)} | {(s, c) for c in cs for s in ("1.5d", "1.5d-oblivious")}
    s = int(round(P**0.5))
    if s * s == P:
        expected |= {("2d", s), ("2d-oblivious", s)}
        two_d = next(r for r in recs if r["strategy"] == "2d")
        if s in cs:  # 2d is 1.5d at c = sqrt(P)
            same = next(r for r in recs if r["strategy"] == "1.5d" and r["replication"] == s)
            assert {**same, "strategy": "2d"} == two_d
    assert names == expected
    assert next(r for r in recs if r["strategy"] == "1d")["vs_1d"] == 1.0


def test_activation_bytes_are_the_dtypes():
    from gnndist.kernels import DTYPES

    from gnndist.config import PRECISIONS

    assert {name: DTYPES[name].itemsize for name in PRECISIONS} == ACTIVATION_BYTES


def test_the_training_peak_is_the_largest_moment_of_the_step():
    """By hand, 10 rows, 3 halo and 2 sent, GCN 8 -> 4 -> 2 (maps first: 8 = 2 x 4) and 6 -> 4 -> 2 (aggregates
    first): the features' dropout, each layer's SpMM (its dropped input, 4 row buffers + halo + sent rows), the
    backward of the second layer's linear map (its rebuilt input and gradient over what the forward kept). The
    forward keeps the dropout masks (1 B a cell) for the backward: the features' from the start (8 x 10 bytes),
    the second layer's after the first layer's ReLU (4 x 10)."""
    assert activation_phases(10, 3, 2, [8, 4, 2]) == [5 * 80, 80 + 320 + 4 * 4 * 45, 80 + 160 + 40 + 160 + 4 * 2 * 45,
                                                      280 + 8 * 40]
    chunk = [4 * w * 2 * 10 for w in (4, 2)]  # half rows multiplied in fp32 a column chunk at a time (w < 16 here)
    assert activation_phases(10, 3, 2, [8, 4, 2], "bf16") == [7 * 80, 80 + 160 + 2 * 4 * 45 + chunk[0],
                                                              80 + 80 + 40 + 80 + 2 * 2 * 45 + chunk[1], 200 + 4 * 40]
    kept = 4 * 6 * 10 + 4 * 4 * 10 + 60 + 40  # the aggregate, the ReLU's output and the two masks
    assert activation_phases(10, 3, 2, [6, 4, 2]) == [5 * 60, 60 + 4 * 6 * 45, kept + 160 + 4 * 2 * 45,
                                                      kept + 8 * 40]
    assert training_peak(50, 7, 10, 3, 2, [8, 4, 2]) - training_peak(50, 7, 10, 3, 2, [8, 4, 2], "bf16") == 1120 - 920


def test_a_cuda_rank_keeps_no_mask_no_mkl_copy_and_the_allocators_floor(capsys, data_root):
    """By hand as above, on CUDA (issue 50): the GPU's hash dropout keeps no mask, half rows need no fp32 chunk,
    no MKL copy, and the allocator's floor replaces the interpreter."""
    from gnndist.parts.memory import CUDA_BASE_BYTES, INTERPRETER_BYTES, SPMM_ENTRY_BYTES

    assert activation_phases(10, 3, 2, [8, 4, 2], device="cuda") == [4 * 80, 320 + 4 * 4 * 45,
                                                                      160 + 160 + 4 * 2 * 45, 160 + 8 * 40]
    assert activation_phases(10, 3, 2, [8, 4, 2], "bf16", "cuda") == [6 * 80, 160 + 2 * 4 * 45,
                                                                       80 + 80 + 2 * 2 * 45, 80 + 4 * 40]
    cpu, gpu = training_peak(50, 7, 10, 3, 2, [8, 4, 2]), training_peak(50, 7, 10, 3, 2, [8, 4, 2], device="cuda")
    # the CPU step peaks at 1120 (its masks), the GPU's at 1040
    assert cpu - gpu == INTERPRETER_BYTES + SPMM_ENTRY_BYTES * 50 - CUDA_BASE_BYTES + 1120 - 1040
    argv = ["simulate", "synthetic-200-d6", "--parts", "2", "--feature-dim", "8", "--device", "cuda", "--json"]
    assert main(argv) == 0
    recs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {r["device"] for r in recs} == {"cuda"}
    assert all(CUDA_BASE_BYTES < p < INTERPRETER_BYTES for p in recs[0]["peak_memory_per_rank"])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_halves_the_rows_not_the_rest(parts, precision):
    """Under bf16 / fp16 each rank's predicted peak drops by what the step's largest moment saves in half (its
    activations, halo and send buffers); the features, index and per-node arrays do not change. Exchanged bytes
    halve."""
    p = parts[4]
    full = {(r["strategy"], r["replication"]): r for r in simulate_partition(p.csr, p.book.offsets, F, LAYERS)}
    half = {(r["strategy"], r["replication"]): r
            for r in simulate_partition(p.csr, p.book.offsets, F, LAYERS, precision=precision)}
    assert full.keys() == half.keys() and {r["precision"] for r in half.values()} == {precision}
    for c, name in ((1, "1d"), (2, "1.5d"), (2, "2d")):
        loads = grid_exchange(p.csr, p.book.offsets, c).loads()
        widths = [F] * (LAYERS + 1)
        drop = [max(activation_phases(ld.rows, h, t, widths)) - max(activation_phases(ld.rows, h, t, widths, precision))
                for ld in loads for h, t in [(ld.expand_recv + ld.fold_recv, ld.expand_send + ld.fold_send)]]
        assert all(d > 0 for d in drop), name
        a, b = full[(name, c)], half[(name, c)]
        assert [x - y for x, y in zip(a["peak_memory_per_rank"], b["peak_memory_per_rank"])] == drop, name
        assert 2 * b["max_sent"] == a["max_sent"] and 2 * b["max_received"] == a["max_received"], name
    assert 2 * half[("1d-oblivious", 1)]["max_sent"] == full[("1d-oblivious", 1)]["max_sent"]
    # SUMMA's A blocks (index pairs and values) stay 4-byte words: less than half is saved
    full_sent, half_sent = full[("2d-oblivious", 2)]["max_sent"], half[("2d-oblivious", 2)]["max_sent"]
    assert full_sent / 2 < half_sent < full_sent


@pytest.fixture()
def data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path))
    return tmp_path


def test_cli_json(capsys, data_root):
    assert main(["simulate", "synthetic-200-d6", "--parts", "2,4", "--feature-dim", "8", "--json"]) == 0
    recs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert isinstance(recs, list) and {r["parts"] for r in recs} == {2, 4}
    assert {r["strategy"] for r in recs} == {"1d", "1.5d", "2d", "1d-oblivious", "1.5d-oblivious", "2d-oblivious"}
    assert {r["precision"] for r in recs} == {"fp32"}


def test_cli_precision(capsys, data_root):
    argv = ["simulate", "synthetic-200-d6", "--parts", "2", "--feature-dim", "8", "--json"]
    assert main(argv) == 0
    full = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*argv, "--precision", "bf16"]) == 0
    half = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {r["precision"] for r in half} == {"bf16"}
    assert [2 * r["max_sent"] for r in half] == [r["max_sent"] for r in full]
    assert all(h < f for a, b in zip(full, half) if a["peak_memory_per_rank"]
               for f, h in zip(a["peak_memory_per_rank"], b["peak_memory_per_rank"]))
    with pytest.raises(SystemExit) as exit_:  # argparse's choices: one line, exit 2
        main([*argv, "--precision", "fp8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'fp8'" in err[0], err


def test_cli_table(capsys, data_root):
    assert main(["simulate", "synthetic-200-d6", "--parts", "4", "--network", "nvlink", "--alpha", "1e-6"]) == 0
    out = capsys.readouterr().out
    assert "max MiB/rank" in out and "2d-oblivious" in out and "nvlink" in out


@pytest.mark.parametrize("argv", [
    ["--parts", "x"], ["--parts", "0,4"], ["--parts", "4,"], ["--parts", "500"],
    ["--replication", "1"], ["--network", "carrier-pigeon"], ["--feature-dim", "0"],
], ids=lambda a: " ".join(a))
def test_cli_errors(capsys, data_root, argv):
    assert main(["simulate", "synthetic-200-d6", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnndist: error:")


def test_link_terms_add_the_split_and_the_pairs_moments():
    """A link rank: its split's new ids and directory held (4 B each), and the largest of the load's, the step's and the
    evaluation's moments (gnndist.parts.memory's module doc), against the node model on the same counts."""
    from gnndist.parts.memory import LINK_BLOCK_BYTES, RANK_BLOCK_BYTES, SCORE_BYTES, LinkLoad, _phases

    load = LinkLoad(nodes=1000, parts=4, positives=300, negatives=2, ids=2000, scored=400, width=8)
    big = int(1000 * -np.expm1(-2 * 300 * 3 / 1000))
    assert load.distinct() == big and load.held() == 4 * 2000 + 4 * 250
    rows, halo, send, widths = 250, 30, 20, [8, 8, 8]
    _, kept = _phases(rows, halo, send, widths, "fp32", "cpu")
    h, nk = 4 * 8 * rows, 600
    far = big - big * rows // 1000  # the distinct rows of other ranks: D less the rank's share of them
    assert load.moments(rows, kept, 4) == [
        8 * 2000 + 8 * 250,
        32 * nk + 5 * 1000,
        kept + h + 8 * nk + 5 * 1000 + 16 * big + 2 * 4 * 8 * far,
        kept + h + 8 * nk + 4 * 8 * (2 * far + rows) + LINK_BLOCK_BYTES,
        SCORE_BYTES * 400 + RANK_BLOCK_BYTES + h]
    node = training_peak(900, 300, rows, halo, send, widths)
    link = training_peak(900, 300, rows, halo, send, widths, link=load)
    assert link == node - max(activation_phases(rows, halo, send, widths)) + load.held() + max(
        activation_phases(rows, halo, send, widths) + load.moments(rows, kept, 4))


def test_cli_edge_split_simulates_a_link_rank(capsys, data_root):
    """--edge-split: the training edges' message graph is partitioned (fewer entries) and each peak is a link
    rank's, above a node rank's."""
    argv = ["simulate", "synthetic-200-d6", "--parts", "2", "--feature-dim", "8", "--json"]
    assert main(argv) == 0
    node = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*argv, "--edge-split", "85,5,10"]) == 0
    link = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {r["task"] for r in node} == {"node"} and {r["task"] for r in link} == {"link"}
    assert link[0]["num_edges"] < node[0]["num_edges"]
    assert all(lp > npk for a, b in zip(node, link) if a["peak_memory_per_rank"]
               for npk, lp in zip(a["peak_memory_per_rank"], b["peak_memory_per_rank"]))


def test_edge_weights_add_their_memory_term_to_every_rank(data):
    """A graph with edge weights (ogbl-collab's, which its recipe trains over): each rank's peak holds a float32
    weight per local entry and a float64 weighted degree per owned and halo row."""
    import torch

    from gnndist.parts.simulate import simulate

    weighted = data.clone()
    weighted.edge_weight = torch.rand(data.edge_index.shape[1])
    plain, heavy = (simulate(d, [2], feature_dim=8, method="random", progress=False) for d in (data, weighted))
    for a, b in zip(plain, heavy):
        if a["peak_memory_per_rank"]:
            extra = np.array(b["peak_memory_per_rank"]) - np.array(a["peak_memory_per_rank"])
            assert (extra > 0).all() and (extra <= 4 * data.edge_index.shape[1] + 8 * 2 * data.num_nodes).all(), extra
