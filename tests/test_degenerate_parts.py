"""Parts that hold little: every rank enters the same collectives whatever its part holds.

A disconnected graph built on purpose: at P = 3 one rank owns a whole component (no
halo, no peers); at P = 4 one rank owns a component and another only isolated nodes with
no training nodes (no halo, no nonzeros at all, nothing in the loss). Training through
every layout on them equals one process; the ranks run under ``--check-collectives``
(:func:`gnndist.testing.run_distributed`), so a diverging collective fails at once, by name.
"""

import pytest
import torch
from gnndist.partition import partition

from gnndist.config import DistConfig, TrainConfig
from gnndist.dist.grid import ProcessGrid
from gnndist.errors import CollectiveDesync, PeerFailed
from gnndist.graph import DistGraph
from gnndist.strategies import strategy_from_config
from gnndist.testing import assert_close, run_distributed, train_steps
from gnndist.training.trainer import Trainer

EPOCHS = 2
MODELS = [("gcn", "none"), ("sage", "none"), ("gin", "batch"), ("gat", "none"), ("gcn2", "none")]
CASES = {  # world -> (strategy, replication) trained there
    3: [("1d", None), ("1.5d", 3)],  # auto: its only candidate at P = 3 is 1d
    4: [("1d", None), ("2d", None), ("auto", None)],  # 1.5d c = 2: the block layout of 2d (q = c = 2)
}
GRAPHS = {3: ([200, 100], 0), 4: ([200, 100], 100)}  # world -> (component sizes, isolated nodes)


def components(sizes: list[int], isolated: int, seed: int = 0):
    """Disjoint synthetic components of ``sizes`` nodes, then ``isolated`` nodes without edges or training nodes."""
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric
    from gnndist.datasets.graph import make_data
    from gnndist.datasets.split import set_random_split

    blobs = [synthetic(n, avg_degree=6, num_classes=3, num_features=8, seed=seed + i) for i, n in enumerate(sizes)]
    offsets = [0]
    for b in blobs:
        offsets.append(offsets[-1] + b.num_nodes)
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([b.x for b in blobs] + [torch.randn(isolated, 8, generator=g)])  # [N, 8]
    y = torch.cat([b.y for b in blobs] + [torch.randint(0, 3, (isolated,), generator=g)])  # [N]
    edge_index = torch.cat([b.edge_index + o for b, o in zip(blobs, offsets)], dim=1)
    data = set_random_split(make_data(x, y, edge_index, "components", 3), seed=seed)
    isolated_nodes = torch.bincount(edge_index[0], minlength=x.shape[0]) == 0  # those added, and any the blobs have
    data.train_mask[isolated_nodes] = False  # never reach the loss
    return data


def _cfg(model: str, norm: str, strategy: str) -> TrainConfig:
    cfg = TrainConfig()
    cfg.model.model, cfg.model.norm, cfg.model.hidden, cfg.model.dropout = model, norm, 8, 0.5
    cfg.model.normalize_features = False
    cfg.optim.epochs = EPOCHS
    cfg.run.progress = False
    cfg.dist.strategy = strategy
    return cfg


def _job(grid, partdir, cases):
    """Per layout and model: the per-epoch losses and the trained weights."""
    out = {}
    for name, c in cases:
        for model, norm in MODELS:
            kw = {"network": "ib"} if name == "auto" else {}  # a preset: no probe on a loaded machine
            graph = DistGraph.load(partdir, grid,
                                   strategy=strategy_from_config(DistConfig(strategy=name, replication=c, **kw)))
            out[(name, c, model)] = _steps(Trainer(graph, _cfg(model, norm, name)))
    return out


def _steps(trainer) -> dict:
    """fit()'s training steps without its evaluation: the losses and weights this file compares."""
    losses = train_steps(trainer)
    return dict(losses=losses, weights={k: v.clone() for k, v in trainer.model.state_dict().items()})


def _part_shapes(p) -> list[tuple[int, int, int, int]]:
    """Per part: (owned rows, halo rows, local nonzeros, training nodes)."""
    train = p.data.train_mask
    return [(lp.n_owned, len(lp.halo_gid), len(lp.col), int(train[lp.orig_id[: lp.n_owned]].sum()))
            for lp in p.local_parts()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for world, (sizes, isolated) in GRAPHS.items():
        data = components(sizes, isolated)
        d1, dp = tmp_path_factory.mktemp(f"deg{world}-1"), tmp_path_factory.mktemp(f"deg{world}")
        partition(data, 1, progress=False).save(d1, dataset="components", progress=False)
        p = partition(data, world, progress=False)
        p.save(dp, dataset="components", progress=False)
        ref = _job(ProcessGrid(), str(d1), [("1d", None)])
        out[world] = (_part_shapes(p), ref, run_distributed(_job, world, str(dp), CASES[world]))
    return out


@pytest.mark.parametrize("world", sorted(GRAPHS))
def test_partition_has_the_degenerate_parts(runs, world):
    shapes = runs[world][0]
    assert any(halo == 0 for _, halo, _, _ in shapes), shapes  # a rank with no halo, beside ranks with one
    assert any(halo > 0 for _, halo, _, _ in shapes), shapes
    if world == 4:
        assert any(nnz == 0 and train == 0 for _, _, nnz, train in shapes), shapes  # no edges, no loss terms


@pytest.mark.parametrize("world", sorted(GRAPHS))
@pytest.mark.parametrize("model", [m for m, _ in MODELS])
def test_training_on_degenerate_parts_equals_one_process(runs, world, model):
    _, ref_runs, got_runs = runs[world]
    ref = ref_runs[("1d", None, model)]
    for name, c in CASES[world]:
        for rank, r in enumerate(got_runs):
            got = r[(name, c, model)]
            label = f"{name} c={c} P={world} rank {rank} {model}"
            assert_close(f"{label} losses", torch.tensor(ref["losses"], dtype=torch.float64),
                         torch.tensor(got["losses"], dtype=torch.float64), rtol=1e-5)
            for k, w in ref["weights"].items():  # three steps of every gradient
                if w.is_floating_point():
                    assert_close(f"{label} {k}", w, got["weights"][k], rtol=1e-5, atol=1e-7)


def _triton_job(grid, partdir, model, norm):
    """:func:`_job`'s 1d training with every kernel forced to Triton (under ``TRITON_INTERPRET=1`` on a CPU)."""
    from gnndist.kernels import KernelSettings

    graph = DistGraph.load(partdir, grid, strategy=strategy_from_config(DistConfig(strategy="1d")),
                           kernel=KernelSettings("triton"))
    return _steps(Trainer(graph, _cfg(model, norm, "1d")))


@pytest.mark.triton
def test_triton_kernels_on_a_rank_with_no_halo_and_no_nonzeros(runs, tmp_path):
    """P = 4: one rank owns a component (no halo), another only isolated nodes (an empty CSR): the Triton SpMM
    launches on both and the GCN trains as one process does (the other kernels on an empty CSR, one process:
    ``tests/test_kernels_training.py``; GAT here took ~60 s under the interpreter, too long for the suite)."""
    model, norm = "gcn", "none"
    sizes, isolated = GRAPHS[4]
    partition(components(sizes, isolated), 4, progress=False).save(tmp_path, dataset="components", progress=False)
    ref = runs[4][1][("1d", None, model)]
    for rank, got in enumerate(run_distributed(_triton_job, 4, str(tmp_path), model, norm)):
        label = f"triton P=4 rank {rank} {model}"
        assert_close(f"{label} losses", torch.tensor(ref["losses"], dtype=torch.float64),
                     torch.tensor(got["losses"], dtype=torch.float64), rtol=1e-5)
        for k, w in ref["weights"].items():
            if w.is_floating_point():
                assert_close(f"{label} {k}", w, got["weights"][k], rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------- the collective check itself
def _skips_one(grid, skipper: int, last: bool):
    """Every rank all-reduces twice, then all-gathers; rank ``skipper`` leaves out its first all-reduce,
    or with ``last`` its final all-gather instead (it leaves the run while the others wait)."""
    t = torch.ones(1)
    try:
        if grid.rank != skipper or last:
            grid.all_reduce_(t)
        grid.all_reduce_(t)
        if not (last and grid.rank == skipper):
            grid.all_gather_object(grid.rank)
        return "no error"
    except (CollectiveDesync, PeerFailed) as e:
        return f"{type(e).__name__}: {e}"


def test_a_skipped_collective_is_a_named_error_at_once():
    said = run_distributed(_skips_one, 3, 1, False, timeout=60)
    assert all(s.startswith("CollectiveDesync") for s in said), said
    assert "rank 0 entered call #2 all_reduce_(sum) on world" in said[0], said[0]
    assert "rank 1 entered call #2 all_gather_object on world" in said[0], said[0]
    assert "tests/test_degenerate_parts.py" in said[0]  # the calls are named by the code that made them


def test_a_rank_that_leaves_early_fails_the_others_at_once():
    said = run_distributed(_skips_one, 2, 1, True, timeout=60)
    assert said[0].startswith("PeerFailed: rank 0: rank 1 left the run while this rank entered call #3 "
                              "all_gather_object"), said[0]
    assert said[1] == "no error"
