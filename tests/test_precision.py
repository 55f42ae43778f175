"""``--precision bf16|fp16``: P ranks equal one process within the dtype's derived bound; fp16's loss scale.

One job per world size (1, 2, 3, 4) trains every case in bf16 and fp16: the logits, the first step's loss
and every gradient from the same initial weights, and the next two steps' losses. The parent compares
P = 2, 3, 4 with one process under :func:`gnndist.training.precision.p_bound` (derived in
``docs/strategies.md``, "Half precision"; the measured differences on Cora:
``benchmarks/precision_equality.py``). fp32 keeps its own contract (``tests/test_exactness.py``).
"""

import json

import pytest
import torch
from gnndist.kernels import DTYPES
from gnndist.partition import partition

from gnndist.config import DistConfig, TrainConfig
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.testing import QUICK_PARTITION, p_differences, record_steps, run_distributed
from gnndist.training.precision import LossScale, check_device, check_model, p_bound
from gnndist.training.trainer import Trainer

CHECK_COLLECTIVES = False  # long loops compared with one process: tests/conftest.py's _collective_check

STEPS = 3
# (model, norm, layers, strategy, worlds): every model family on 1d; the block layouts on the GCN
# (every model at every P measured once in 1m45s under load 5: docs/strategies.md; the suite keeps a spread)
CASES = [
    ("gcn", "none", 2, "1d", (3, 4)),
    ("sage", "none", 2, "1d", (2,)),
    ("gin", "batch", 2, "1d", (4,)),
    ("gat", "none", 2, "1d", (3,)),
    ("gcn2", "none", 4, "1d", (2, 4)),
    ("resgcn", "batch", 4, "1d", (3,)),
    ("revgnn", "batch", 4, "1d", (2, 4)),
    ("gcn", "none", 2, "2d", (4,)),
    ("gcn", "none", 2, "1.5d", (4,)),
]
PRECISIONS = ("bf16", "fp16")


def _data():
    from gnndist.datasets import synthetic  # here: the spawned ranks importing this module never load torch_geometric

    data = synthetic(240, avg_degree=6, num_classes=4, num_features=12, seed=7)
    data.train_mask[:] = False
    data.train_mask[::3] = True  # 80 training nodes spread over every part
    return data


def _cfg(model, norm, layers, precision):
    cfg = TrainConfig()
    m = cfg.model
    m.model, m.norm, m.layers, m.dropout, m.normalize_features = model, norm, layers, 0.3, False
    m.hidden = 16 if model == "gat" else 8
    cfg.optim.epochs, cfg.optim.precision = STEPS, precision
    cfg.optim.loss_scale = 2.0**10  # no overflow at these widths: every step is taken
    cfg.run.progress = False
    return cfg


def _dist(strategy):
    return DistConfig(strategy=strategy, replication=2 if strategy == "1.5d" else None)


def _rank_job(grid, partdir):
    out = {}
    for model, norm, layers, strategy, worlds in CASES:
        if grid.world_size > 1 and grid.world_size not in worlds:
            continue
        for precision in PRECISIONS:
            layout = strategy if grid.world_size > 1 else "1d"  # one process: the reference of every layout
            out[(model, norm, strategy, precision)] = record_steps(grid, partdir, _cfg(model, norm, layers, precision),
                                                                    _dist(layout))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = _data()
    results = {}
    for world in (1, 2, 3, 4):
        d = tmp_path_factory.mktemp(f"p{world}")
        partition(data, world, progress=False, **QUICK_PARTITION).save(d, dataset="toy", progress=False)
        results[world] = run_distributed(_rank_job, world, str(d))
        results[world, "meta"] = json.loads((d / "META.json").read_text())
    return data, results


CASE_IDS = [pytest.param((m, n, L, s), w, p, id=f"{m}-{s}-P{w}-{p}") for m, n, L, s, ws in CASES for w in ws
            for p in PRECISIONS]


@pytest.mark.parametrize("case,world,precision", CASE_IDS)
def test_p_ranks_equal_one_within_bound(runs, case, world, precision):
    data, results = runs
    model, norm, layers, strategy = case
    key = (model, norm, strategy, precision)
    ranks = results[world]
    bound = p_bound(DTYPES[precision], layers)
    for r in ranks:  # every rank took the same steps, with the same loss (all-reduced)
        assert r[key]["skipped"] == 0
        assert r[key]["losses"] == ranks[0][key]["losses"]
    diff = p_differences([results[1][0][key]], [r[key] for r in ranks], data.num_nodes)
    for what in ("forward", "first_loss"):  # one forward from the same weights: the derived bound
        assert diff[what] <= bound.step, f"{what}: {diff[what]:.2e} > {bound.step:.2e}"
    assert diff["grad"] <= bound.grad, f"gradients: max difference {diff['grad']:.2e} of the largest > {bound.grad:.2e}"
    # the trajectory is not what the bound covers (Adam's first update is lr x sign(g): a gradient entry within
    # rounding of zero moves its weight +-lr either way); the losses of STEPS steps are held to STEPS x the step
    # bound as a tripwire (on Cora every model's stays within it, benchmarks/precision_equality.py)
    assert diff["losses"] <= STEPS * bound.step, \
        f"losses: {diff['losses']:.2e} > {STEPS * bound.step:.2e} ({STEPS} steps)"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_half_rows_travel_in_half(runs, precision):
    """Under bf16 / fp16 the halo rows are 2 bytes per element (``--comm-dtype auto``): half of fp32's.

    The GCN's rows after its first layer are 4 wide (classes) in every precision, so the layer's forward
    sends the partition's halo rows x 4 x 2 bytes; the counter holds the last training step's forward
    (each step starts it from zero) and the evaluation forward after it."""
    _, results = runs
    key = ("gcn", "none", "1d", precision)
    fwd = sum(r[key]["halo_bytes"]["layer1"]["fwd_sent"] for r in results[3])
    recv = sum(r[key]["halo_bytes"]["layer1"]["fwd_received"] for r in results[3])
    rows = sum(layout[0] for layout in results[3, "meta"]["layouts"]["1"])  # each rank's halo rows sent
    assert rows > 0 and fwd == recv == rows * 4 * 2 * 2


def test_bounds_are_derived_from_the_unit_roundoff():
    bf, fp = p_bound(torch.bfloat16, 2), p_bound(torch.float16, 2)
    assert bf.step == pytest.approx(8 * fp.step)  # 2**-8 against 2**-11
    assert p_bound(torch.bfloat16, 4).step > bf.step  # deeper: more roundings on the chain


# ---------------------------------------------------------------------------------------------- fp16's scale
class _Blowup(torch.nn.Module):
    """A linear map whose logits on rank 0 are multiplied by 1e4: its fp16 gradients overflow there only."""

    def __init__(self, f_in, f_out):
        super().__init__()
        self.lin = torch.nn.Linear(f_in, f_out)

    def forward(self, graph, x):
        out = self.lin(x)
        return out * 1e4 if graph.grid.rank == 0 else out


def _overflow_job(grid, partdir):
    cfg = _cfg("gcn", "none", 2, "fp16")
    cfg.optim.loss_scale = 2.0**16
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, cfg, model=_Blowup)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with graph.context.step(epoch=0):
        trainer.train_step(0)
    after = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return dict(unchanged=all(torch.equal(before[n], after[n]) for n in before), scale=trainer.precision.scale,
                skipped=trainer.precision.scaler.skipped_total)


def test_fp16_overflow_on_one_rank_skips_the_step_on_every_rank(runs, tmp_path):
    data, _ = runs
    partition(data, 2, progress=False, **QUICK_PARTITION).save(tmp_path, dataset="toy", progress=False)
    ranks = run_distributed(_overflow_job, 2, str(tmp_path))
    for r in ranks:  # only rank 0 overflowed; both skipped and halved the scale
        assert r == dict(unchanged=True, scale=2.0**15, skipped=1)


def test_the_run_reports_fp16s_skipped_steps_and_final_scale(tmp_path, capsys):
    """A loss scale that overflows every step: each is skipped and halves it; the summary line and --json say so."""
    import json

    from gnndist.cli import main

    partition(_data(), 1, progress=False, **QUICK_PARTITION).save(tmp_path, dataset="toy", progress=False)
    flags = ["train", str(tmp_path), "--epochs", "2", "--no-progress", "--precision", "fp16", "--loss-scale", "1e30"]
    assert main(flags) == 0
    assert "fp16: 2 steps skipped, loss scale 2.5e+29" in capsys.readouterr().out
    assert main(flags + ["--json"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["precision"] == "fp16" and line["loss_scale"] == {"scale": 2.5e29, "skipped_steps": 2}
    assert main(flags[:-4] + ["--json"]) == 0  # fp32: no scale
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["loss_scale"] is None


def test_loss_scale_warns_after_many_skipped_steps():
    scale = LossScale(2.0**16)
    with pytest.warns(RuntimeWarning, match=r"--loss-scale\).*--precision bf16"):
        for epoch in range(10):
            scale.update(True, epoch)
    assert scale.scale == 2.0**6
    for epoch in range(100):
        scale.update(False, epoch)
    assert scale.scale == 2.0**7 and scale.skipped == 0  # 100 clean steps double it


# ---------------------------------------------------------------------------------------------- bad input
def test_precision_the_device_cannot_run_is_one_line_naming_bf16():
    with pytest.raises(UserError, match=r"^--precision fp16: meta cannot run it .*use --precision bf16"):
        check_device(torch.device("meta"), "fp16")
    check_device(torch.device("cpu"), "bf16")  # torch 2.13's CPU autocast runs both
    check_device(torch.device("cpu"), "fp16")


def test_layer_that_cannot_run_in_half_is_named():
    pytest.importorskip("torch_geometric")
    from gnndist.nn import build_model

    model = build_model("gine", 12, 8, 4, 2, 0.0, edge_dim=3)
    with pytest.raises(UserError, match=r"PyGAdapter \(convs.0\) cannot run in half precision: the wrapped GINEConv"):
        check_model(model, "bf16")
    check_model(model, "fp32")


@pytest.mark.parametrize("comm,precision,msg", [
    ("fp32", "bf16", "--comm-dtype fp32 with --precision bf16: the exchanged rows are bf16 already"),
    ("bf16", "fp16", "--comm-dtype bf16 with --precision fp16"),
    ("fp16", "fp32", "--comm-dtype fp16 with --precision fp32: fp32 rows above 65504"),
])
def test_comm_dtype_that_does_not_go_with_the_precision(comm, precision, msg):
    from gnndist.config import OptimConfig

    with pytest.raises(UserError, match="^" + msg.replace("(", r"\(")):
        TrainConfig(dist=DistConfig(comm_dtype=comm), optim=OptimConfig(precision=precision))


@pytest.mark.parametrize("comm,precision,wire", [("auto", "fp32", "fp32"), ("bf16", "fp32", "bf16"),
                                                 ("auto", "bf16", "bf16"), ("fp16", "fp16", "fp16")])
def test_wire_dtype(comm, precision, wire):
    from gnndist.config import OptimConfig

    assert TrainConfig(dist=DistConfig(comm_dtype=comm), optim=OptimConfig(precision=precision)).wire_dtype == wire
