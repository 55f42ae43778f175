"""1.5D and 2D equal 1D and one process, and every strategy moves exactly the bytes the simulator predicts.

Two spawns per world size: an SpMM-level job (outputs and input gradients of ``sum``,
``gcn`` and ``mean`` aggregation, bytes per rank per layer) and a training job (per-epoch
losses with dropout, logits, every gradient and the metrics, for GCN, SAGE-mean and GIN
with batch norm). References are computed in this process: a dense ``A`` for the SpMMs
and a one-rank run for training.
"""

import copy

import numpy as np
import pytest
import torch
from gnndist.partition import partition

from gnndist.config import DistConfig, TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.parts.simulate import grid_exchange, grid_loads
from gnndist.strategies import strategy_from_config
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import Trainer

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

WIDTH = 5
EPOCHS = 5
# world -> strategies as (name, replication); 2d is the square grid, 1.5d c = P has a single block row
SPMM_CASES = {
    2: [("1d", None), ("1.5d", 2)],
    4: [("1d", None), ("1.5d", 2), ("2d", None), ("1.5d", 4)],
    8: [("1.5d", 2), ("1.5d", 4)],  # the non-square grids (q > c, q < c); 1d: at 2 and 4
}
TRAIN_CASES = {  # world -> strategies; models run for each (P = 8's layouts: SPMM_CASES, forward and backward)
    4: [("1.5d", 2), ("2d", None)],
}
MODELS = [("gcn", "none"), ("sage", "none"), ("gin", "batch")]


def _data():
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric

    data = synthetic(240, avg_degree=7, num_classes=4, num_features=12, seed=3)
    data.train_mask[:] = False
    data.train_mask[::3] = True
    return data


def _features(ids: torch.Tensor, width: int, salt: float) -> torch.Tensor:
    """Partition-invariant test features from dataset ids. ``[n, width]``."""
    k = torch.arange(1, width + 1, dtype=torch.float64)
    return torch.sin(ids.double()[:, None] * k * salt + k).float()


def _spmm_job(grid, partdir, cases):
    out = {}
    for name, c in cases:
        res = {}
        for overlap in (True, False):  # the overlapped and the one-shot forward
            strategy = strategy_from_config(DistConfig(strategy=name, replication=c, overlap=overlap))
            graph = DistGraph.load(partdir, grid, strategy=strategy)
            ids = graph.orig_id[: graph.n_owned]
            for mode in ("sum", "gcn", "mean"):
                x = _features(ids, WIDTH, 0.37).requires_grad_()
                y = graph.spmm(x, weight="gcn" if mode == "gcn" else None,
                               reduce="mean" if mode == "mean" else "sum", tag=mode)
                (y * _features(ids, WIDTH, 0.11)).sum().backward()
                res[(mode, overlap)] = (y.detach(), x.grad)
            res[("bytes", overlap)] = graph.context.counter.per_tag()
        res["ids"] = ids
        res["replication"] = graph.strategy.replication
        res["pairs"] = graph.strategy.pairs(grid.world_size)  # from the plans
        stored, keys = graph.structure.layout_pairs, list(graph.structure.layouts)  # the partition's (auto's layouts)
        mine = str(graph.strategy.replication)
        res["stored_pairs"] = stored[keys.index(mine)] if mine in keys else None
        out[(name, c)] = res
    return out


@pytest.fixture(scope="module")
def spmm_runs(tmp_path_factory):
    data = _data()
    out = {}
    for world, cases in SPMM_CASES.items():
        d = tmp_path_factory.mktemp(f"spmm{world}")
        p = partition(data, world, progress=False, **QUICK_PARTITION)
        p.save(d, dataset="toy", progress=False)
        out[world] = (p, run_distributed(_spmm_job, world, str(d), cases))
    return data, out


def _dense_reference(data, mode):
    n = data.num_nodes
    A = torch.zeros(n, n, dtype=torch.float64)
    A[data.edge_index[1], data.edge_index[0]] = 1.0  # row = destination
    deg = A.sum(1)
    if mode == "gcn":
        dinv = (deg + 1).rsqrt()
        A = dinv[:, None] * (A + torch.eye(n, dtype=torch.float64)) * dinv[None, :]
    elif mode == "mean":
        A = A / deg.clamp(min=1)[:, None]
    ids = torch.arange(n)
    x = _features(ids, WIDTH, 0.37).double()
    g = _features(ids, WIDTH, 0.11).double()
    return A @ x, A.t() @ g


@pytest.mark.parametrize("world", sorted(SPMM_CASES))
@pytest.mark.parametrize("mode", ["sum", "gcn", "mean"])
def test_spmm_equals_one_process(spmm_runs, world, mode):
    data, runs = spmm_runs
    ref_out, ref_grad = _dense_reference(data, mode)
    _, ranks = runs[world]
    for case in SPMM_CASES[world]:
        got_out = torch.zeros_like(ref_out)
        got_grad = torch.zeros_like(ref_grad)
        seen = torch.zeros(data.num_nodes, dtype=torch.long)
        for overlap in (True, False):
            seen = torch.zeros(data.num_nodes, dtype=torch.long)
            for r in ranks:
                res = r[case]
                got_out[res["ids"]] = res[(mode, overlap)][0].double()
                got_grad[res["ids"]] = res[(mode, overlap)][1].double()
                seen[res["ids"]] += 1
            assert torch.all(seen == 1), f"{case}: every node must be owned by exactly one rank"
            assert_close(f"{case} overlap={overlap} {mode} output", ref_out, got_out, rtol=1e-5)
            assert_close(f"{case} overlap={overlap} {mode} input gradient", ref_grad, got_grad, rtol=1e-5)


@pytest.mark.parametrize("world", sorted(SPMM_CASES))
def test_bytes_equal_simulator(spmm_runs, world):
    """Measured bytes of every rank, layer and direction equal ``gnndist simulate``'s prediction exactly."""
    _, runs = spmm_runs
    p, ranks = runs[world]
    for case in SPMM_CASES[world]:
        c = ranks[0][case]["replication"]
        loads = grid_loads(p.csr, p.book.offsets, c)
        for rank, r in enumerate(ranks):
            want = loads[rank].bytes(WIDTH, 4)
            for mode in ("sum", "gcn", "mean"):
                for overlap in (True, False):
                    got = {k: r[case][("bytes", overlap)].get(mode, {}).get(k, 0) for k in want}
                    assert got == want, (case, rank, mode, overlap, got, want)
        if case[0] != "1d":
            assert sum(ld.fold_send for ld in loads) > 0, f"{case}: a grid layout folds"
        # every rank's rows from / to each peer: the plans' = the partition's stored row = grid_exchange's
        ex = grid_exchange(p.csr, p.book.offsets, c)
        for rank, r in enumerate(ranks):
            want = np.stack([ex.expand[rank], ex.fold[rank]])
            assert np.array_equal(r[case]["pairs"], want), (case, rank)
            assert r[case]["stored_pairs"] is None or np.array_equal(r[case]["stored_pairs"], want), (case, rank)
        assert any(r[case]["stored_pairs"] is not None for r in ranks) or c == world, case


def _cfg(model, norm, dropout=0.5, epochs=EPOCHS):
    cfg = TrainConfig()
    cfg.model.model, cfg.model.norm, cfg.model.dropout, cfg.model.hidden = model, norm, dropout, 8
    cfg.model.normalize_features = False
    cfg.optim.epochs = epochs
    cfg.run.progress = False
    return cfg


def _train_job(grid, partdir, cases):
    """Per strategy and model: losses of EPOCHS epochs with dropout and the final metrics; one step's grads without."""
    out = {}
    for name, c in cases:
        for model, norm in MODELS:
            graph = DistGraph.load(partdir, grid,
                                   strategy=strategy_from_config(DistConfig(strategy=name, replication=c)))
            trainer = Trainer(graph, _cfg(model, norm))
            summary = trainer.fit().to_dict()
            losses = [row["loss"] for row in trainer.history]
            metrics = {k: summary[k] for k in ("train_acc", "val_acc", "test_acc")}

            graph = DistGraph.load(partdir, grid,
                                   strategy=strategy_from_config(DistConfig(strategy=name, replication=c)))
            trainer = Trainer(graph, _cfg(model, norm, dropout=0.0))
            trainer.model.train()
            logits = trainer.model(graph, graph.x)
            trainer.task.objective(logits).backward()
            trainer.allreduce_grads()
            grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
            bn = {n: b.clone() for n, b in trainer.model.named_buffers() if "running" in n}
            out[(name, c, model)] = dict(losses=losses, metrics=metrics, grads=grads, logits=logits.detach(),
                                         ids=graph.orig_id[: graph.n_owned], bn=bn)
    return out


@pytest.fixture(scope="module")
def train_runs(tmp_path_factory):
    data = _data()
    d1 = tmp_path_factory.mktemp("train1")
    partition(data, 1, progress=False).save(d1, dataset="toy", progress=False)
    ref = _train_job(ProcessGrid(), str(d1), [("1d", None)])
    out = {}
    for world, cases in TRAIN_CASES.items():
        d = tmp_path_factory.mktemp(f"train{world}")
        partition(data, world, progress=False, **QUICK_PARTITION).save(d, dataset="toy", progress=False)
        out[world] = run_distributed(_train_job, world, str(d), cases)
    return data, ref, out


@pytest.mark.parametrize("world", sorted(TRAIN_CASES))
@pytest.mark.parametrize("model", [m for m, _ in MODELS])
def test_training_equals_one_process(train_runs, world, model):
    data, ref_runs, runs = train_runs
    ref = ref_runs[("1d", None, model)]
    ref_logits = torch.zeros(data.num_nodes, ref["logits"].shape[1])
    ref_logits[ref["ids"]] = ref["logits"]
    for name, c in TRAIN_CASES[world]:
        for rank, r in enumerate(runs[world]):
            got = r[(name, c, model)]
            label = f"{name} c={c} P={world} rank {rank} {model}"
            assert_close(f"{label} losses", torch.tensor(ref["losses"], dtype=torch.float64),
                         torch.tensor(got["losses"], dtype=torch.float64), rtol=1e-5)
            assert got["metrics"] == pytest.approx(ref["metrics"], abs=1e-12), label  # counts: every node once
            assert_close(f"{label} logits", ref_logits[got["ids"]], got["logits"], rtol=1e-5)
            for n, g in ref["grads"].items():
                assert_close(f"{label} grad {n}", g, got["grads"][n], rtol=1e-5, atol=1e-7)
            for n, b in ref["bn"].items():
                assert_close(f"{label} {n}", b, got["bn"][n], rtol=1e-5, atol=1e-7)
    assert ref["losses"][-1] < ref["losses"][0]  # it trains


def test_one_process_refuses_replication():
    data = _data()
    p = partition(data, 1, progress=False)
    arrays = next(p.part_arrays())
    meta = {"N": data.num_nodes, "classes": 4, "offsets": p.book.offsets.tolist(), "parts": 1}
    with pytest.raises(Exception, match="--replication 2 must divide"):
        DistGraph(arrays, meta, ProcessGrid(),
                  strategy=strategy_from_config(DistConfig(strategy="1.5d", replication=2)))
    with pytest.raises(Exception, match="square number of ranks"):
        DistGraph(arrays, meta, ProcessGrid(), strategy=strategy_from_config(DistConfig(strategy="2d")))
    g = DistGraph(copy.deepcopy(arrays), meta, ProcessGrid(), strategy=strategy_from_config(DistConfig(strategy="1d")))
    assert g.strategy.name == "1d"


@pytest.mark.parametrize("ranks,argv,message", [
    (2, ["--strategy", "2d"], "square number of ranks"),
    (2, ["--strategy", "1.5d"], "needs --replication"),
    (2, ["--strategy", "1.5d", "--replication", "3"], "must divide the number of ranks"),
    (2, ["--strategy", "1d", "--replication", "2"], "--replication is for"),
    (4, ["--strategy", "2d", "--replication", "4"], "drop --replication"),
], ids=["2d-non-square", "1.5d-no-c", "c-not-dividing", "c-with-1d", "2d-wrong-c"])
def test_layout_that_does_not_fit_is_one_line(tmp_path, ranks, argv, message, capsys):
    """Checked before any rank starts (the layout is checked before the part count)."""
    from gnndist.cli import main

    d = tmp_path / "p2"
    partition(_data(), 2, progress=False).save(d, dataset="toy", progress=False)
    assert main(["train", str(d), "--epochs", "1", "--no-progress", "--ranks", str(ranks), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("stored,ranks,layouts", [(True, 4, {"1d", "2d(2x2)"}), (False, 4, {"1d", "2d(2x2)"})],
                         ids=["layouts-in-meta", "1d-only-partition"])
def test_auto_reports_choices_and_predicted_bytes(tmp_path, stored, ranks, layouts, monkeypatch, capsys,
                                                  pooled_ranks):
    """``--strategy auto --json``: one strategy per layer, predicted bytes equal the measured ones.

    With the layouts' counts in META.json only the chosen layouts are built; a partition
    without them (as older versions wrote) still loads, and auto gathers the counts itself.
    """
    import json

    from gnndist.cli import main

    d = tmp_path / f"p{ranks}"
    partition(_data(), ranks, progress=False, **QUICK_PARTITION).save(d, dataset="toy", progress=False)
    meta = json.loads((d / "META.json").read_text())
    assert set(meta["layouts"]) == {"1", "2"}  # 1d and the 2 x 2 grid
    if not stored:
        del meta["layouts"]
        (d / "META.json").write_text(json.dumps(meta))
    monkeypatch.setenv("GNNDIST_DATA", str(tmp_path))  # auto's timed decisions are kept there
    assert main(["train", str(d), "--ranks", str(ranks), "--epochs", "2", "--strategy", "auto", "--network",
                 "ethernet", "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    chosen = summary["strategies"]
    assert set(chosen) == {"layer0", "layer1"}
    for tag, s in chosen.items():
        assert s["strategy"] in ("1d", "1.5d", "2d") and set(s["candidates"]) == layouts
        assert summary["predicted_bytes_per_layer"][tag] == summary["comm_bytes_per_layer"][tag]
    assert sum("auto: layer" in line for line in err.splitlines()) == 2  # logged once per layer, not per step


def _backward_order_job(grid, partdir, name, c):
    """The events of one overlapped SpMM's backward on this rank: exchanges started and finished, products run."""
    from gnndist.strategies import base

    events = []
    real = (base.PendingGather, base.PendingFold, base.transposed_product)

    def recorder(cls, kind):
        class Recorded(cls):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                events.append(f"{kind} start")

            def wait(self):
                events.append(f"{kind} wait")
                return super().wait()
        return Recorded

    def product(csr, *a, **k):
        events.append("interior" if csr is block.csr_int else "boundary")
        return real[2](csr, *a, **k)

    graph = DistGraph.load(partdir, grid, strategy=strategy_from_config(DistConfig(strategy=name, replication=c)))
    block = graph.strategy.block
    x = _features(graph.orig_id[: graph.n_owned], WIDTH, 0.37).requires_grad_()
    y = graph.strategy.spmm(x, "t")
    base.PendingGather, base.PendingFold = recorder(real[0], "gather"), recorder(real[1], "fold")
    base.transposed_product = product
    try:
        y.sum().backward()
    finally:
        base.PendingGather, base.PendingFold, base.transposed_product = real
    return events


@pytest.mark.parametrize("name,c,expected", [
    ("1d", None, ["boundary", "fold start", "interior", "fold wait"]),
    ("2d", None, ["gather start", "boundary", "gather wait", "boundary", "fold start", "interior", "fold wait"]),
])
def test_backward_overlaps_its_exchanges(tmp_path, name, c, expected):
    """The backward's exchanges are in flight while products run: the partial rows' gradients travel during the own
    boundary product, the halo's gradients travel home during the interior product (autograd ran them blocking)."""
    data = _data()
    p = partition(data, 4, progress=False, **QUICK_PARTITION)
    p.save(tmp_path, dataset="toy", progress=False)
    for events in run_distributed(_backward_order_job, 4, str(tmp_path), name, c):
        assert events == expected


def _hosts_job(grid, partdir, hosts):
    """auto's counts of every candidate on ranks that say they sit on ``hosts`` (labels, one per rank)."""
    from gnndist.cost import Network
    from gnndist.strategies.auto import Auto

    grid.hosts = tuple(hosts)
    net = Network("two-level", alpha=0.0, beta=1e9, gamma_sparse=0.0, gamma_dense=0.0, beta_host=1e6)
    auto = Auto(net, cache=None)
    DistGraph.load(partdir, grid, strategy=auto)
    return [s.describe() for s in auto.options], auto.loads


@pytest.mark.parametrize("stored", [True, False], ids=["layout-pairs", "older-partition"])
def test_auto_splits_each_layout_by_host(tmp_path, stored):
    """On several hosts auto's counts say which rows stay on a host and which cross to another, from the stored
    ``layout_pairs`` or, for a partition made before them, the candidates' own plans: both equal
    :func:`gnndist.cost.on_hosts` of the partition's exchanges, and the two-level model then prices the rows
    that leave a host at ``beta_host``."""
    import json

    from gnndist.cost import Network, exchange_time, on_hosts

    d = tmp_path / "p4"
    p = partition(_data(), 4, progress=False, **QUICK_PARTITION)
    p.save(d, dataset="toy", progress=False)
    if not stored:  # as a partition of format 2 before layout_pairs
        meta = json.loads((d / "META.json").read_text())
        meta["sha256"] = {rel: h for rel, h in meta["sha256"].items() if not rel.endswith("layout_pairs.npy")}
        (d / "META.json").write_text(json.dumps(meta))
        for k in range(4):
            (d / f"part-{k}" / "layout_pairs.npy").unlink()
    hosts = ["a", "a", "b", "b"]
    names, loads = run_distributed(_hosts_job, 4, str(d), hosts)[0]
    assert names == ["1d", "2d(2x2)"]
    net = Network("n", alpha=0.0, beta=1e9, gamma_sparse=0.0, gamma_dense=0.0, beta_host=1e6)
    for c, got in zip((1, 2), loads):
        ex = grid_exchange(p.csr, p.book.offsets, c)
        want = on_hosts(ex.loads(), ex.expand, ex.fold, hosts)
        assert got == want
        host_rows = [ex.expand[np.ix_(r, o)].sum() for r, o in (([0, 1], [2, 3]), ([2, 3], [0, 1]))]
        assert all(ld.expand_host == max(host_rows) and ld.hosts == 2 for ld in got)  # a's in = b's out
        # the rows within a host at beta, the host's rows to the other host at beta_host (the slower)
        assert exchange_time(got[0], 8, net) == pytest.approx(
            32 * (max(got[0].expand_near / 1e9, got[0].expand_host / 1e6)
                  + max(got[0].fold_near / 1e9, got[0].fold_host / 1e6)))


def _placement_counter():
    """``benchmarks/placement.py``'s :func:`exchange`: a layout's expand and fold counted from the entries of ``A``,
    either placement."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "placement.py"
    spec = importlib.util.spec_from_file_location("benchmarks_placement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.exchange


@pytest.mark.parametrize("world, c", [(4, 2), (8, 2), (8, 4)])
def test_the_replica_group_across_hosts_is_the_other_replication(world, c):
    """Why ``auto`` offers no second placement: on the symmetric adjacency, ``c``'s grid placed with its replica
    group across consecutive ranks (hosts) holds, on every rank, the transpose of the block of the usual placement
    of ``P / c``, so its expand is that layout's fold and its fold that layout's expand, rank by rank and peer by
    peer: the same rows on the same links (one direction for the other). ``auto`` considers every ``c``."""
    p = partition(_data(), world, progress=False, **QUICK_PARTITION)
    exchange = _placement_counter()
    rows = np.repeat(np.arange(p.csr.num_nodes, dtype=np.int64), np.diff(p.csr.rowptr))
    cols, off = np.asarray(p.csr.col, dtype=np.int64), np.asarray(p.book.offsets, dtype=np.int64)
    usual = grid_exchange(p.csr, p.book.offsets, c)  # the counter agrees with the partition's own counts
    assert all(np.array_equal(a, b) for a, b in zip(exchange(rows, cols, off, c, False), (usual.expand, usual.fold)))
    expand, fold = exchange(rows, cols, off, c, True)
    other = grid_exchange(p.csr, p.book.offsets, world // c)
    assert expand.sum() > 0 and fold.sum() > 0
    assert np.array_equal(expand, other.fold) and np.array_equal(fold, other.expand)
    assert not np.array_equal(expand, usual.expand) or world == c * c
