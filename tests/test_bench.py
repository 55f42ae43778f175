"""``gnndist bench``: the CSV has its columns, the figures plot the logged numbers, the breakdown adds up.

Tiny graphs, P <= 2, one training run: the point is the bookkeeping, not the speed.
"""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from gnndist.bench import plots
from gnndist.bench.common import BREAKDOWN, ENV_COLUMNS, Rows, Settings, environment, read_csv, write_csv
from gnndist.bench.page import BEGIN, END, render, update_readme
from gnndist.bench.suites import run_suite
from gnndist.dist.timing import PhaseTimer, bracket
from gnndist.testing import pooled_launches

STRONG = ("dataset", "P", "strategy", "epoch_s", "median_epoch_s", *BREAKDOWN, "bytes_per_rank", "bytes_per_rank_max",
          "predicted_bytes_per_rank", "predicted_bytes_per_rank_max", "peak_memory_max_mb", "epochs_timed")
PARTITION = ("method", "P", "partition_s", "volume", "edge_cut", "max_send_over_mean", "imbalance_nodes",
             "imbalance_edges")
PEER = ("provider", "step_s", "steps_timed", "gnndist_speedup")


def _suite(name: str, s: Settings) -> list[dict]:
    rows = Rows(name, environment("cpu"))
    run_suite(name, s, rows)
    path = write_csv(s.out / f"{name}.csv", rows.rows)
    plots.draw(name, read_csv(path), s.out)
    return read_csv(path)


@pytest.fixture(scope="module")
def strong(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    s = Settings(out=out, dataset="cora", parts=[2], strategies=["1d"], epochs=7, warmup=2, hidden=16)
    with pooled_launches():  # the bookkeeping is under test here, not the launcher
        return out, _suite("strong", s)


def test_strong_csv_columns(strong):
    out, rows = strong
    assert len(rows) == 1
    r = rows[0]
    for col in (*ENV_COLUMNS, *STRONG):
        assert col in r and r[col] is not None, col
    assert r["epochs_timed"] >= 5 and r["loadavg_1m"] >= 0 and r["breakdown_synchronised"] == "True"
    assert {p.name for p in out.glob("strong_*.png")} == {"strong_speedup.png", "strong_breakdown.png",
                                                           "strong_bytes.png"}


def test_strong_breakdown_adds_up_to_the_epoch(strong):
    _, rows = strong
    for r in rows:
        parts = sum(r[k] for k in BREAKDOWN)
        assert abs(parts - r["median_epoch_s"]) <= 0.05 * r["median_epoch_s"], (parts, r["median_epoch_s"])
        assert min(r[k] for k in BREAKDOWN) >= 0 and r["aggregation_s"] > 0 and r["comm_s"] > 0


def test_strong_measured_bytes_equal_simulated(strong):
    _, rows = strong
    r = rows[0]
    assert r["bytes_per_rank"] > 0
    assert r["bytes_per_rank"] == r["predicted_bytes_per_rank"]
    assert r["bytes_per_rank_max"] == r["predicted_bytes_per_rank_max"]


def test_weak_measured_bytes_equal_simulated_when_the_first_layer_aggregates_first(tmp_path, pooled_ranks):
    """64 features, hidden 64: the first GCN layer aggregates the features (forward-only SpMM)."""
    from gnndist.bench.suites import weak
    from gnndist.cost import aggregate_first

    s = Settings(out=tmp_path, parts=[2], epochs=4, warmup=1, hidden=64)
    assert aggregate_first(64, s.hidden)
    rows = Rows("weak", environment("cpu"))
    weak(s, rows, tmp_path, nodes_per_rank=300)
    (r,) = rows.rows
    assert r["bytes_per_rank"] > 0
    assert r["bytes_per_rank"] == r["predicted_bytes_per_rank"]
    assert r["bytes_per_rank_max"] == r["predicted_bytes_per_rank_max"]


def test_plotted_bytes_and_breakdown_equal_logged(strong):
    _, rows = strong
    fig = plots.bytes_per_rank(rows)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert list(lines["1d measured"].get_ydata() * 2**20) == [r["bytes_per_rank"] for r in rows]
    assert list(lines["1d simulate"].get_ydata() * 2**20) == pytest.approx(
        [r["predicted_bytes_per_rank"] for r in rows])
    fig = plots.breakdown(rows)
    bars = [p.get_height() for p in fig.axes[0].patches]  # part by part, one bar per row
    want = [1e3 * r[k] for k in BREAKDOWN for r in rows]
    assert bars == pytest.approx(want)


def test_partition_suite_metis_beats_random(tmp_path):
    s = Settings(out=tmp_path, dataset="cora", parts=[2, 4], train_parts=[])
    rows = _suite("partition", s)
    for col in (*ENV_COLUMNS, *PARTITION):
        assert all(r[col] is not None for r in rows), col
    by = {(r["method"], r["P"]): r for r in rows}
    for P in (2, 4):
        assert by[("metis-vol", P)]["volume"] < by[("random", P)]["volume"]
    fig = plots.partition_volume(rows)
    lines = {ln.get_label(): ln for ln in fig.axes[0].lines}
    assert list(lines["random"].get_ydata()) == [by[("random", P)]["volume"] for P in (2, 4)]
    assert (tmp_path / "partition_volume.png").stat().st_size > 0


def test_peer_suite_and_report(tmp_path):
    s = Settings(out=tmp_path, dataset="cora", epochs=7, warmup=2, hidden=16)
    rows = _suite("peer", s)
    assert [r["provider"] for r in rows] == ["gnndist", "pyg sparse_csr cached", "pyg edge_index cached"]
    for col in PEER:
        assert all(r[col] is not None for r in rows), col
    assert rows[0]["gnndist_speedup"] == 1.0
    (tmp_path / "run.json").write_text(json.dumps({"command": "gnndist bench peer", "wall_s": 1.0}))
    text = render(tmp_path)
    assert "| gnndist |" in text and "peer_time.png" in text and "gnndist bench peer" in text
    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\nheadline\n")
    update_readme(readme, text)
    update_readme(readme, text)  # idempotent: the block is replaced, not appended again
    body = readme.read_text()
    assert body.count(BEGIN) == 1 and body.count(END) == 1 and body.startswith("# Benchmarks\n\nheadline")


def test_phase_timer_is_exclusive_forward_and_backward(monkeypatch):
    clock = itertools.count()  # every reading advances one "second"
    monkeypatch.setattr("gnndist.dist.timing.time.perf_counter", lambda: float(next(clock)))
    t = PhaseTimer()
    with t.phase("dense"):
        with t.phase("aggregation"):
            with t.phase("comm"):
                pass
    # readings: dense 0, aggregation 1, comm 2..3, aggregation ..4, dense ..5
    assert dict(t.seconds) == {"comm": 1.0, "aggregation": 2.0, "dense": 2.0}
    t.reset()
    x = torch.randn(4, 3, requires_grad=True)
    with t.phase("dense"):
        y = bracket(t, "aggregation", lambda h: 2 * h, x)
        y.sum().backward()  # backward opens and closes "aggregation" inside "dense"
    assert torch.equal(x.grad, torch.full((4, 3), 2.0))
    assert t.seconds["aggregation"] == 2.0  # forward 1 + backward 1
    assert not t._stack


def test_model_table_errors_and_auto_margins():
    """The calibration summary: median and worst |modelled / measured - 1|, auto against the fastest fixed layout."""
    from gnndist.bench.page import calibration_summary, model

    base = {"dataset": "g", "model": "gcn", "hidden": 16, "P": 4, "replication": 1, "loadavg_1m": 1.0}
    rows = [{**base, "strategy": "1d", "layers_chosen": "1d,1d", "epoch_s": 0.2, "model_epoch_s": 0.3,
             "model_ratio": 1.5},
            {**base, "strategy": "2d", "replication": 2, "layers_chosen": "2d/2,2d/2", "epoch_s": 0.1,
             "model_epoch_s": 0.09, "model_ratio": 0.9},
            {**base, "strategy": "auto", "layers_chosen": "2d/2,1d", "epoch_s": 0.11, "model_epoch_s": 0.11,
             "model_ratio": 1.0}]
    c = calibration_summary(rows)
    assert c["cases"] == 3 and c["median"] == pytest.approx(0.1) and c["worst"] == pytest.approx(0.5)
    assert c["within_20"] == 2
    (a,) = c["auto"]
    assert a["fastest"] == "2d" and a["margin"] == pytest.approx(0.1)
    text = "\n".join(model(rows))
    assert "median 10 %, worst 50 %" in text and "| g gcn h=16 | 4 | 2d/2,1d | 2d | +10.0 % |" in text


def test_missing_matplotlib_is_refused_before_any_run(tmp_path, capsys, monkeypatch):
    """Without matplotlib a suite stops at once in one line (not after its runs, when it draws), writing nothing."""
    import importlib.util

    from gnndist.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    out = tmp_path / "out"
    assert main(["bench", "tta", "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib" in err[0] and "--no-plots" in err[0], err
    assert not out.exists()
