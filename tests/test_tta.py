"""``gnndist bench tta``: the pure pieces of the protocol, one problem on every side, one evaluator for all, the
driver of a peer process (against a fake peer written here), and a tiny gnndist-only run of the suite.

Tiny graphs and budgets of a fraction of a second: the bookkeeping is under test, never the speed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import numpy as np
import pytest
import torch

from gnndist.bench import add_arguments
from gnndist.bench import main as bench_main
from gnndist.bench.common import read_csv
from gnndist.bench.page import tta_page
from gnndist.bench.tta import Block, Evaluators, FullGraphEvaluator, _config, check_peers, run_block, run_gnndist
from gnndist.bench.tta_driver import peer_job, run_peer
from gnndist.bench.tta_problem import export_problem, gnndist_partition, load_graph, load_problem
from gnndist.bench.tta_protocol import (
    COMMON_SPACE,
    SIDES,
    Hyper,
    Point,
    Run,
    TTASettings,
    anytime,
    array_hashes,
    at_best_val,
    check_same,
    chosen,
    fanouts,
    spread,
    summary_rows,
    target,
    time_to,
)
from gnndist.errors import UserError

GRAPH = "synthetic-400-d6"  # 400 nodes, 8 classes, 64 Gaussian features


def _curve(*vals: float) -> list[Point]:
    return [Point(float(i + 1), float(i + 1), i + 1, v, v / 2) for i, v in enumerate(vals)]


# ---------------------------------------------------------------------- the pure pieces
def test_target_is_a_fraction_of_the_best_median_over_seeds():
    assert target({"a": [0.8, 0.9, 0.7], "b": [0.85]}) == pytest.approx(0.98 * 0.85)
    assert target({"a": [0.8, 0.9, 0.7]}, fraction=1.0) == pytest.approx(0.8)
    assert target({}) is None and target({"a": []}) is None


def test_time_to_is_the_first_point_at_the_target():
    c = _curve(0.5, 0.7, 0.9, 0.95)
    assert time_to(c, 0.7) == c[1] and time_to(c, 0.71) == c[2]
    assert time_to(c, 0.96) is None and time_to(c, None) is None and time_to([], 0.1) is None


def test_test_at_best_val_is_the_first_maximum():
    c = _curve(0.5, 0.9, 0.7, 0.9)
    assert at_best_val(c) == c[1] and at_best_val([]) is None
    assert anytime(c) == [(1.0, 0.5), (2.0, 0.9), (3.0, 0.9), (4.0, 0.9)]


def test_spread_counts_never_as_never():
    s = spread([3.0, 1.0, None])
    assert (s.median, s.lo, s.hi, s.reached, s.n) == (3.0, 1.0, None, 2, 3)
    assert spread([None, None, 1.0]).median is None
    assert spread([2.0, 4.0]).median == 3.0 and spread([]).n == 0


def test_tuning_keeps_the_fastest_to_the_target_then_the_best_validation():
    slow, fast, never_good, never_bad = _curve(0.1, 0.9), _curve(0.9), _curve(0.8), _curve(0.2)
    assert chosen([slow, fast, never_good], 0.85) == 1
    assert chosen([never_bad, never_good], 0.85) == 1
    assert chosen([fast, fast], 0.85) == 0 and chosen([], 0.5) is None


def test_sides_declare_defaults_and_a_seeded_search():
    assert fanouts(2) == (15, 10) and fanouts(4) == (15, 10, 5, 5) and fanouts(1) == (15,)
    g2, g8 = SIDES["gnndist"].default(2, 96, 1000), SIDES["gnndist"].default(8, 96, 1000, "gcn2")
    assert (g2.model, g2.hidden, g2.lr, g2.dropout) == ("sage", 96, 0.03, 0.5) and g8.model == "gcn2"
    assert g8.lr == 0.01  # each model's preset lr (SAGE's measured for full-batch Adam, GCNII's recipe)
    # without --hidden: SAGE at 256, the deep model at its registered preset width (GCNII's recipe: 64)
    assert SIDES["gnndist"].default(2, None, 1000).hidden == 256
    assert [SIDES["gnndist"].default(8, None, 1000, m).hidden for m in ("gcn2", "resgcn")] == [64, 64]
    nb = SIDES["pyg-neighbor"].default(3, 96, 1000)
    assert (nb.model, nb.hidden, nb.batch_size, nb.fanouts) == ("sage", 256, 1024, (15, 10, 5))
    cl = SIDES["pyg-cluster"].default(2, 96, 15_500)
    assert (cl.num_parts, cl.clusters_per_batch) == (100, 20)
    a = SIDES["dgl-neighbor"].trials(nb, 5, seed=0)
    assert a == SIDES["dgl-neighbor"].trials(nb, 5, seed=0) != SIDES["dgl-neighbor"].trials(nb, 5, seed=1)
    space = SIDES["dgl-neighbor"].space
    for h in a:
        assert h.lr in space["lr"] and h.hidden in space["hidden"] and h.batch_size in space["batch_size"]
        assert len(h.fanouts) == 3 and h.layers == 3 and h.model == "sage"


def test_trials_are_paired_across_sides_in_the_shared_fields():
    """Trial j of every side tries the same lr, dropout and width; the sampler's own fields are its own draws."""
    draws = {name: side.trials(side.default(2, 96, 15_500), 8, seed=0) for name, side in SIDES.items()}
    shared = {name: [(h.lr, h.dropout, h.hidden) for h in hs] for name, hs in draws.items()}
    assert len({tuple(v) for v in shared.values()}) == 1  # every side alike, trial by trial
    assert len(set(shared["gnndist"])) > 1  # and the trials differ
    for field, values in COMMON_SPACE.items():  # stratified: every value once in each run of len(values) trials
        column = [getattr(h, field) for h in draws["gnndist"]]
        for a in range(0, 8, len(values)):
            assert sorted(column[a : a + len(values)]) == sorted(values), (field, column)
    assert len({h.batch_size for h in draws["pyg-neighbor"]}) > 1  # the sampler's fields are drawn too
    assert [h.fanouts for h in draws["pyg-neighbor"]] != [h.fanouts for h in draws["dgl-neighbor"]]  # apart


def test_summary_over_seeds():
    h = Hyper("sage", 2, 16, 0.5, 0.01, 0.0)
    runs = [Run("g", 2, "gnndist", "default", s, h, _curve(*v), s_per_epoch=0.1 * (s + 1), load_start=1.0,
                load_end=2.0) for s, v in enumerate([(0.5, 0.9), (0.9,), (0.6, 0.7)])]
    runs.append(Run("g", 2, "gnndist", "trial-0", 1000, h, _curve(1.0)))  # trials are not in the summary
    runs.append(Run("g", 2, "pyg-cluster", "default", 0, status="unavailable: no METIS"))
    rows = summary_rows(runs, 0.85)
    assert [r["side"] for r in rows] == ["gnndist", "pyg-cluster"]
    r = rows[0]
    assert (r["time_to_target_s"], r["time_to_target_s_min"], r["time_to_target_s_max"]) == (2.0, 1.0, "")
    assert r["reached"] == 2 and r["seeds"] == 3 and r["s_per_epoch"] == pytest.approx(0.2)
    assert r["test_at_best_val"] == 0.45 and (r["load_min"], r["load_max"]) == (1.0, 2.0)
    assert rows[1]["status"] == "unavailable: no METIS" and rows[1]["time_to_target_s"] == ""


def test_settings_errors_name_the_flag():
    for kw, flag in (({"sides": ["pyg-magic"]}, "--sides"), ({"seeds": 0}, "--seeds"), ({"budget_s": 0}, "--budget-s"),
                     ({"depths": [0]}, "--depths"), ({"trials": -1}, "--trials")):
        with pytest.raises(UserError, match=flag):
            TTASettings(**kw)


# ---------------------------------------------------------------------- one problem on every side
@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    d = tmp_path_factory.mktemp("tta")
    return load_problem(export_problem(GRAPH, str(d / "data"), 0, d / "problem"))


@pytest.fixture(scope="module")
def graph(problem, tmp_path_factory):
    partdir, _ = gnndist_partition(problem, tmp_path_factory.mktemp("tta-part") / "p1")
    return load_graph(partdir)


def test_problem_is_one_symmetric_csr_with_its_hashes(problem):
    a, meta = problem.arrays, problem.meta
    n = meta["nodes"]
    rows = np.repeat(np.arange(n), np.diff(a["indptr"]))
    assert a["indptr"].dtype == a["indices"].dtype == np.int64 and a["indptr"][-1] == a["indices"].size
    assert not (rows == a["indices"]).any()  # no self-loops
    keys = rows * n + a["indices"]
    assert (np.diff(keys) > 0).all()  # sorted, no duplicates
    assert set(keys.tolist()) == set((a["indices"] * n + rows).tolist())  # symmetric
    assert meta["split"].startswith("random 60/20/20") and meta["train"] == 240 and meta["val"] == meta["test"] == 80
    assert not (a["train_mask"] & a["val_mask"]).any() and (a["train_mask"] | a["val_mask"] | a["test_mask"]).all()
    assert meta["sha256"] == array_hashes(a) and not meta["features_normalized"]  # Gaussian features: left alone


def test_a_changed_mask_is_refused(problem, tmp_path):
    changed = dict(problem.arrays, train_mask=problem.arrays["train_mask"].copy())
    changed["train_mask"][0] = ~changed["train_mask"][0]
    check_same(problem.sha256, array_hashes(problem.arrays))
    with pytest.raises(UserError, match="train_mask differs"):
        check_same(problem.sha256, array_hashes(changed), who="pyg-neighbor")
    with pytest.raises(UserError, match="y missing"):
        check_same(problem.sha256, {k: v for k, v in problem.sha256.items() if k != "y"})
    np.savez(tmp_path / "problem.npz", **changed)  # a problem file changed after its export
    (tmp_path / "problem.json").write_text(json.dumps(dict(problem.meta)))
    with pytest.raises(UserError, match="train_mask differs"):
        load_problem(tmp_path / "problem.npz")


def test_features_are_exactly_what_gnndist_trains_on(tmp_path):
    """Cora's features are non-negative: the export holds them row-normalised as gnndist's default does at load."""
    import scipy.sparse as sp
    from gnndist.datasets import load
    from gnndist.partition import partition

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    p = load_problem(export_problem("cora", None, 0, tmp_path))
    assert p.meta["features_normalized"] and p.meta["split"].startswith("random")  # 140 training nodes: too few
    a = p.arrays
    x = sp.csr_matrix((a["x_data"], a["x_indices"], a["x_indptr"]), shape=tuple(a["x_shape"])).toarray()
    d = partition(load("cora"), 1, "random", progress=False).save(tmp_path / "cora-1", dataset="cora", progress=False)
    g = DistGraph.load(d, ProcessGrid(), normalize_features=True)  # gnndist's own path, its default
    assert torch.equal(torch.from_numpy(x)[g.orig_id.long()], g.x)


# ---------------------------------------------------------------------- one evaluator
@pytest.mark.parametrize("model,layers", [("sage", 2), ("gcn2", 4)])
def test_shared_evaluator_equals_the_trainers_evaluation(graph, problem, tmp_path, model, layers):
    from gnndist.training.trainer import Trainer

    h = Hyper(model, layers, 16, 0.5, 0.01, 5e-4)
    trainer = Trainer(load_graph(gnndist_partition(problem, tmp_path / "own")[0]), _config(h, seed=3, epochs=4))
    evaluate = FullGraphEvaluator(graph, model, layers, 16)
    for epoch in range(4):
        row = trainer.epoch(epoch)
        r = evaluate(trainer.model.state_dict())
        assert (r["val"], r["test"]) == (row["val_acc"], row["test_acc"]) and r["eval_s"] > 0
    with pytest.raises(RuntimeError, match="lin_r"):
        evaluate({k: v for k, v in trainer.model.state_dict().items() if "lin_r" not in k} if model == "sage"
                 else {"convs.0.lin_r.weight": torch.zeros(1)})


def test_run_gnndist_stops_when_until_holds(graph):
    h = Hyper("sage", 2, 16, 0.5, 0.01, 0.0)
    run = run_gnndist(graph, Evaluators(graph)(h), h, 0, 60.0, 10, until=lambda r: r.epochs >= 2)
    assert (run.epochs, len(run.points)) == (2, 2)
    assert run_gnndist(graph, Evaluators(graph)(h), h, 0, 60.0, 3).epochs == 3  # no until: the epoch budget


# ---------------------------------------------------------------------- the driver, against a fake peer
FAKE_PEER = r'''
import hashlib, json, os, sys
import numpy as np
import scipy.sparse as sp
job = json.load(open(sys.argv[1]))
z = np.load(job["problem"])
sha = {k: hashlib.sha256(np.ascontiguousarray(z[k]).tobytes()).hexdigest() for k in z.files}
if job.get("fake") == "wrong-hash":
    sha["train_mask"] = "0" * 64
if job.get("fake") == "crash":
    sys.stderr.write("fake peer: out of memory\n")
    sys.exit(3)
print("a line that is not an event", flush=True)
print(json.dumps({"event": "setup", "setup_s": 0.25, "sha256": sha, "versions": {"fake": "1"}}), flush=True)
F, C, H, L = int(z["x_shape"][1]), int(z["y"].max()) + 1, job["hidden"], job["layers"]
widths = [F] + [H] * (L - 1) + [C]
rng = np.random.default_rng(job["seed"])


def weights():
    state = {}
    for i in range(L):
        state[f"convs.{i}.lin_l.weight"] = rng.standard_normal((widths[i + 1], widths[i])).astype(np.float32)
        state[f"convs.{i}.lin_l.bias"] = rng.standard_normal(widths[i + 1]).astype(np.float32)
        state[f"convs.{i}.lin_r.weight"] = rng.standard_normal((widths[i + 1], widths[i])).astype(np.float32)
    return state


if job["mode"] == "check":  # SAGE-mean over the whole graph in numpy: the logits gnndist's model must give
    state, n = weights(), len(z["indptr"]) - 1
    a = sp.csr_matrix((np.ones(len(z["indices"]), np.float32), z["indices"], z["indptr"]), shape=(n, n))
    h = sp.csr_matrix((z["x_data"], z["x_indices"], z["x_indptr"]), shape=tuple(z["x_shape"])).toarray()
    for i in range(L):
        mean = (a @ h) / np.maximum(np.diff(z["indptr"]), 1)[:, None]
        w_l, w_r = state[f"convs.{i}.lin_l.weight"], state[f"convs.{i}.lin_r.weight"]
        h = mean @ w_l.T + state[f"convs.{i}.lin_l.bias"] + h @ w_r.T
        h = np.maximum(h, 0) if i < L - 1 else h
    if job.get("fake") == "swap":  # lin_l and lin_r mapped the wrong way round
        for i in range(L):
            state[f"convs.{i}.lin_l.weight"], state[f"convs.{i}.lin_r.weight"] = (
                state[f"convs.{i}.lin_r.weight"], state[f"convs.{i}.lin_l.weight"])
    os.makedirs(job["snapshots"], exist_ok=True)
    path = os.path.join(job["snapshots"], "check.npz")
    np.savez(path, logits=h.astype(np.float32), **state)
    print(json.dumps({"event": "check", "path": path}), flush=True)
    sys.exit(0)
answers, deleted, train_s = [], True, 0.0
for k in range(3):
    train_s += 1.0
    path = os.path.join(job["snapshots"], f"snap-{k}.npz")
    np.savez(path, **weights())
    print(json.dumps({"event": "eval", "snapshot": path, "train_s": train_s, "epoch": 0.5 * (k + 1),
                      "steps": 3 * (k + 1)}), flush=True)
    answers.append(sys.stdin.readline().strip())
    deleted = deleted and not os.path.exists(path)
    if answers[-1] == "stop":
        break
print(json.dumps({"event": "done", "train_s": train_s, "steps": 3 * len(answers), "epochs": 0.5 * len(answers),
                  "s_per_epoch": 2.0, "answers": answers, "deleted": deleted}), flush=True)
'''


@pytest.fixture(scope="module")
def fake_peer(tmp_path_factory):
    path = tmp_path_factory.mktemp("fake") / "fake_peer.py"
    path.write_text(FAKE_PEER)
    return path


def _job(problem, tmp_path, budget_s=100.0, mode="train", **extra):
    h = SIDES["pyg-neighbor"].default(2, 16, problem.meta["nodes"])
    h = Hyper(h.model, 2, 16, h.dropout, h.lr, h.weight_decay, 64, (5, 5))
    return {**peer_job(problem.path, "pyg-neighbor", h, 7, 1, budget_s, 1000, 0.5, tmp_path / "snaps", mode), **extra}


def test_driver_scores_every_snapshot_and_deletes_it(problem, graph, fake_peer, tmp_path):
    evaluate = FullGraphEvaluator(graph, "sage", 2, 16)
    rec = run_peer(sys.executable, fake_peer, _job(problem, tmp_path), evaluate, problem.sha256, tmp_path / "w")
    assert [p.train_s for p in rec.points] == [1.0, 2.0, 3.0] and [p.steps for p in rec.points] == [3, 6, 9]
    assert all(0 <= p.val <= 1 and 0 <= p.test <= 1 for p in rec.points) and rec.evals == 3 and rec.eval_s > 0
    assert rec.last["answers"] == ["ok", "ok", "ok"] and rec.last["deleted"]
    assert rec.setup["versions"] == {"fake": "1"} and rec.setup["setup_s"] == 0.25
    assert not (tmp_path / "snaps").exists() and not list((tmp_path / "w").iterdir())  # nothing left behind


def test_driver_stops_the_peer_at_the_budget(problem, graph, fake_peer, tmp_path):
    evaluate = FullGraphEvaluator(graph, "sage", 2, 16)
    rec = run_peer(sys.executable, fake_peer, _job(problem, tmp_path, budget_s=2.0), evaluate, problem.sha256,
                   tmp_path / "w")
    assert rec.last["answers"] == ["ok", "stop"] and len(rec.points) == 2 and rec.last["deleted"]


def test_driver_check_mode_and_failures(problem, fake_peer, tmp_path):
    rec = run_peer(sys.executable, fake_peer, _job(problem, tmp_path, mode="check"), None, problem.sha256, tmp_path)
    assert rec.points == [] and rec.last["event"] == "check" and rec.check["logits"].shape == (400, 8)
    assert not (tmp_path / "snaps").exists()
    with pytest.raises(UserError, match="train_mask differs"):
        run_peer(sys.executable, fake_peer, _job(problem, tmp_path, fake="wrong-hash"), None, problem.sha256, tmp_path)
    with pytest.raises(UserError, match="exited with 3 before its done line: fake peer: out of memory"):
        run_peer(sys.executable, fake_peer, _job(problem, tmp_path, fake="crash"), None, problem.sha256, tmp_path)


def test_check_compares_a_peers_logits_with_gnndists(problem, graph, fake_peer, tmp_path):
    """The check run's weights through gnndist's model give the peer's own logits; swapped weights do not."""
    t = TTASettings(datasets=[GRAPH], depths=[2], sides=["gnndist", "pyg-neighbor", "dgl-neighbor"], hidden=16)
    b = Block(problem, graph, Evaluators(graph), 0.0, sys.executable, fake_peer, {}, tmp_path)
    assert check_peers(b, t) == {}
    swapped = tmp_path / "swapped.py"
    swapped.write_text(FAKE_PEER.replace('job.get("fake") == "swap"', 'job["peer"] == "dgl-neighbor"'))
    b = Block(problem, graph, Evaluators(graph), 0.0, sys.executable, swapped, {}, tmp_path)
    (peer, why), = check_peers(b, t).items()
    assert peer == "dgl-neighbor" and "logits (400, 8) differ from gnndist's (400, 8) on the same weights" in why


def test_a_block_with_tuning_a_fake_peer_and_an_unavailable_side(problem, graph, fake_peer, tmp_path):
    """One dataset and depth: each side's trials, then tuned and default over the seeds, the target over them."""
    t = TTASettings(datasets=[GRAPH], depths=[2], sides=["gnndist", "pyg-neighbor", "pyg-cluster"], seeds=2,
                    budget_s=0.05, trials=2, threads=1, hidden=16, max_epochs=3)
    b = Block(problem, graph, Evaluators(graph), 0.1, sys.executable, fake_peer, {"pyg-cluster": "no METIS"},
              tmp_path)
    runs, T_tune, T = run_block(b, t, 2)
    by = {(r.side, r.config, r.seed): r for r in runs}
    assert {k for k in by if k[0] == "pyg-cluster"} == {("pyg-cluster", "default", 0)}
    assert by["pyg-cluster", "default", 0].status == "unavailable: no METIS"
    for side in ("gnndist", "pyg-neighbor"):
        assert {(c, s) for sd, c, s in by if sd == side} == {("trial-0", 1000), ("trial-1", 1001), ("default", 0),
                                                             ("default", 1), ("tuned", 0), ("tuned", 1)}
    g = by["gnndist", "default", 0]
    assert g.status == "ok" and g.epochs == len(g.points) <= 3 and g.partition_s == 0.1 and g.evals == len(g.points)
    assert [p.epoch for p in g.points] == list(range(1, len(g.points) + 1)) and g.points[-1].train_s == g.train_s
    assert by["pyg-neighbor", "default", 0].points[0].train_s == 1.0 and by["pyg-neighbor", "tuned", 1].steps == 3
    assert 0 < T_tune <= 0.98 and 0 < T <= 0.98
    assert math.isclose(T, 0.98 * max(np.median([max(p.val for p in by[s, c, k].points) for k in (0, 1)])
                                      for s in ("gnndist", "pyg-neighbor") for c in ("default", "tuned")))
    tuned = by["gnndist", "tuned", 0].hyper
    assert tuned in (by["gnndist", "trial-0", 1000].hyper, by["gnndist", "trial-1", 1001].hyper)


# ---------------------------------------------------------------------- the suite end to end
def test_bench_tta_end_to_end_gnndist_only(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    out = tmp_path / "out"
    args = p.parse_args(["tta", "--quick", "--datasets", GRAPH, "--sides", "gnndist", "--budget-s", "0.2",
                         "--hidden", "16", "--threads", "1", "--root", str(tmp_path / "data"), "--out", str(out)])
    assert bench_main(args) == 0
    rows = read_csv(out / "tta.csv")
    assert [(r["side"], r["config"], r["seed"], r["status"]) for r in rows] == [("gnndist", "default", 0, "ok"),
                                                                                 ("gnndist", "default", 1, "ok")]
    for r in rows:
        assert r["dataset"] == GRAPH and r["depth"] == 2 and r["hidden"] == 16 and r["evals"] >= 1
        assert r["load_start"] >= 0 and r["eval_s"] > 0
    # one side, one config: T is 0.98 x the median over its seeds of their best validation accuracy (a seed's own
    # best may lie above it, as the budget lets one seed train further than the other)
    assert rows[0]["target"] == pytest.approx(0.98 * statistics.median(r["best_val"] for r in rows))
    for r in rows:
        assert r["time_to_target_s"] is None or r["time_to_target_s"] <= r["train_s"]
    assert any(r["time_to_target_s"] is not None for r in rows)  # the best median reaches 0.98 of itself
    points = [json.loads(ln) for ln in (out / "tta_curves.jsonl").read_text().splitlines()]
    assert len(points) == sum(r["evals"] for r in rows)
    summary = read_csv(out / "tta_summary.csv")
    assert len(summary) == 1 and summary[0]["reached"] >= 1 and summary[0]["seeds"] == 2
    assert (out / f"tta_{GRAPH}_L2.png").exists()
    page = tta_page(out)
    assert "Full-graph or mini-batch?" in page and f"| {GRAPH} | 2 | gnndist | default |" in page


def test_a_real_peer_end_to_end(problem, graph, tmp_path):
    """The peers' venv's own pyg-neighbor on the tiny problem, when that venv is installed (never installed here)."""
    from gnndist.bench.peer_env import MINIBATCH, STAMP, default_venv, ensure

    venv = default_venv()
    stamp = json.loads((venv / STAMP).read_text()) if (venv / STAMP).exists() else {}
    if not stamp.get("steps", {}).get("probe", {}).get("ok"):
        pytest.skip(f"the peers' venv {venv} is not installed (python -m gnndist.bench.peer_env installs it)")
    if not MINIBATCH.exists():
        pytest.skip(f"{MINIBATCH} is not written yet")
    env = ensure(venv)
    if "pyg-neighbor" in env.unavailable:
        pytest.skip(f"pyg-neighbor: {env.unavailable['pyg-neighbor']}")
    t = TTASettings(datasets=[GRAPH], depths=[2], sides=["pyg-neighbor"], seeds=1, budget_s=0.5, threads=1,
                    hidden=16, max_epochs=3, eval_every_s=0.1)
    b = Block(problem, graph, Evaluators(graph), 0.0, env.python, MINIBATCH, {}, tmp_path)
    assert check_peers(b, t) == {}  # its model's logits are gnndist's on the same weights
    runs, _, T = run_block(b, t, 2)
    (r,) = runs
    assert r.status == "ok", r.status
    assert r.points and all(0 <= p.val <= 1 for p in r.points) and r.versions.get("torch_geometric")
    assert 0 < r.epochs <= 3 and T is not None
