"""The mini-batch peers (``gnndist/bench/minibatch.py``) in their own venv: gnndist's model, and the protocol.

Each available peer's model, its weights loaded into gnndist's ``sage`` model, gives gnndist's logits on a one-part
graph; a short training run sends setup, eval (a snapshot gnndist loads) and done. These run against the installed
peers' venv (``python -m gnndist.bench.peer_env`` installs it, see :mod:`gnndist.bench.peer_env`) and skip, with
the reason, where it is missing or a peer is unavailable there. The job checks and the graphbolt patch need no venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnndist.bench import peer_env
from gnndist.bench.peer_env import MINIBATCH, PEERS
from gnndist.testing import QUICK_PARTITION, assert_close

F_IN, HIDDEN, CLASSES, LAYERS = 12, 16, 4, 3  # 12 -> 16 -> 16 -> 4: a layer widening and one narrowing
ISOLATED = (0, 1, 2)  # nodes without neighbours: their mean is 0 on every side


@pytest.fixture(scope="module")
def peers():
    env = peer_env.installed()
    if env is None:
        pytest.skip(f"the peers' venv is not installed at {peer_env.default_venv()} "
                    "(python -m gnndist.bench.peer_env installs it; $GNNDIST_PEERS_VENV moves it)")
    return env


def _need(env, peer: str) -> None:
    if peer in env.unavailable:
        pytest.skip(f"{peer} is unavailable in {env.python.parent.parent}: {env.unavailable[peer]}")


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    """A 200-node graph (a few isolated nodes) with sparse features: ``(problem.npz, the Data it holds)``."""
    from gnndist.datasets import synthetic

    data = synthetic(200, avg_degree=6, num_classes=CLASSES, num_features=F_IN, seed=7)
    row, col = data.edge_index
    keep = ~(torch.isin(row, torch.tensor(ISOLATED)) | torch.isin(col, torch.tensor(ISOLATED)))
    data.edge_index = data.edge_index[:, keep]  # still symmetric and sorted by (row, col)
    g = torch.Generator().manual_seed(1)
    data.x = data.x * (torch.rand(data.x.shape, generator=g) < 0.25)  # ~25 % non-zeros
    n = data.num_nodes
    x = sp.csr_matrix(data.x.numpy())
    arrays = {"indptr": np.concatenate([[0], np.cumsum(np.bincount(row[keep].numpy(), minlength=n))]).astype(np.int64),
              "indices": data.edge_index[1].numpy().astype(np.int64),
              "x_indptr": x.indptr.astype(np.int64), "x_indices": x.indices.astype(np.int64),
              "x_data": x.data.astype(np.float32), "x_shape": np.array(data.x.shape, dtype=np.int64),
              "y": data.y.numpy().astype(np.int64), "train_mask": data.train_mask.numpy(),
              "val_mask": data.val_mask.numpy(), "test_mask": data.test_mask.numpy()}
    path = tmp_path_factory.mktemp("problem") / "problem.npz"
    np.savez(path, **arrays)
    return path, data


@pytest.fixture(scope="module")
def gnndist_graph(problem, tmp_path_factory):
    """The problem's graph as one part, and each owned row's node id."""
    from gnndist.partition import partition, read_meta, read_part

    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph

    out = tmp_path_factory.mktemp("part") / "p1"
    partition(problem[1], 1, **QUICK_PARTITION).save(out, dataset="peers", progress=False)
    graph = DistGraph(read_part(out, 0), read_meta(out), ProcessGrid(device=torch.device("cpu")))
    return graph, graph.orig_id[: graph.n_owned].long()


def _job(problem_path, tmp_path, peer: str, mode: str, **over) -> dict:
    return {"problem": str(problem_path), "peer": peer, "layers": LAYERS, "hidden": HIDDEN, "dropout": 0.5,
            "lr": 0.01, "weight_decay": 5e-4, "batch_size": 32, "fanouts": [5, 4, 3], "num_parts": 8,
            "clusters_per_batch": 2, "threads": 1, "seed": 3, "budget_s": 3.0, "max_epochs": None,
            "eval_every_s": 1.0, "snapshots": str(tmp_path / "snapshots"), "mode": mode, **over}


def _run(python, job: dict, tmp_path, answer=lambda event: "ok", timeout: float = 60.0):
    """Run ``minibatch.py`` on ``job``: its events in order, and its exit code; ``answer(event)`` replies to each
    eval."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    log = open(tmp_path / "stderr.log", "w+")  # a file: a full stderr pipe must not stall the peer
    proc = subprocess.Popen([str(python), str(MINIBATCH), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    events = []
    try:
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "eval":
                proc.stdin.write(answer(events[-1]) + "\n")
                proc.stdin.flush()
        rc = proc.wait()
    finally:
        timer.cancel()
        log.seek(0)
        err = log.read()
        log.close()
    assert rc == 0, f"minibatch.py exited {rc}: {err[-2000:]}"
    return events


def _gnndist_model(weights):
    from gnndist.nn.models.spec import build_model

    model = build_model("sage", F_IN, HIDDEN, CLASSES, LAYERS, 0.5)
    model.load_state_dict({k: torch.from_numpy(weights[k]) for k in model.state_dict()}, strict=True)
    return model.eval()


@pytest.mark.parametrize("peer", PEERS)
def test_peer_model_is_gnndists(peers, peer, problem, gnndist_graph, tmp_path):
    """The peer's model at its initial weights, on the full graph, gives gnndist's logits with those weights; the
    peer read the arrays gnndist wrote."""
    _need(peers, peer)
    events = _run(peers.python, _job(problem[0], tmp_path, peer, "check"), tmp_path)
    assert [e["event"] for e in events] == ["setup", "check"]
    with np.load(problem[0]) as z:
        assert events[0]["sha256"] == {k: hashlib.sha256(np.ascontiguousarray(z[k]).tobytes()).hexdigest()
                                       for k in z.files}
    with np.load(events[1]["path"]) as z:
        out = dict(z)
    names = {f"convs.{i}.{p}" for i in range(LAYERS) for p in ("lin_l.weight", "lin_l.bias", "lin_r.weight")}
    assert set(out) == names | {"logits"}
    graph, ids = gnndist_graph
    with torch.no_grad():
        ref = _gnndist_model(out)(graph, graph.x)  # [N, C] in the part's row order
    logits = torch.from_numpy(out["logits"])[ids]  # [N, C]
    assert_close(f"{peer} logits", ref, logits, rtol=1e-5)
    assert logits[list(ISOLATED)].abs().sum() > 0  # the isolated rows count: lin_r and the bias reach them


@pytest.mark.parametrize("peer", PEERS)
def test_training_sends_setup_evals_and_done(peers, peer, problem, tmp_path):
    """A 1.5-second run answered ``ok``: setup, evaluations whose snapshots gnndist loads, then done."""
    _need(peers, peer)
    budget, every = 1.5, 0.5  # three evaluation periods, as 3 s at 1 s showed (half the suite's wait, per peer)
    events = _run(peers.python, _job(problem[0], tmp_path, peer, "train", budget_s=budget, eval_every_s=every),
                  tmp_path)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "setup" and kinds[-1] == "done" and set(kinds[1:-1]) == {"eval"}, kinds
    assert events[0]["setup_s"] >= 0 and set(events[0]["versions"]) >= {"torch", "numpy"}
    evals, done = events[1:-1], events[-1]
    assert len(evals) >= round(budget / every)  # the epoch ends and every period of the budget
    for a, b in zip(evals, evals[1:]):
        assert b["train_s"] >= a["train_s"] and b["steps"] > a["steps"] and b["epoch"] > a["epoch"]
    assert done["train_s"] >= budget and done["steps"] == evals[-1]["steps"] > 0
    assert done["epochs"] == pytest.approx(evals[-1]["epoch"])
    assert done["s_per_epoch"] == pytest.approx(done["train_s"] / done["epochs"], rel=1e-3)
    with np.load(evals[-1]["snapshot"]) as z:
        _gnndist_model(dict(z))  # every gnndist parameter, under its name, of its shape


def test_stop_answer_ends_the_run(peers, problem, tmp_path):
    """``stop`` at the first evaluation: done follows at its step, long before the budget."""
    peer = next((p for p in PEERS if p not in peers.unavailable), None)
    if peer is None:
        pytest.skip(f"no peer is available: {peers.unavailable}")
    events = _run(peers.python, _job(problem[0], tmp_path, peer, "train", budget_s=60.0, eval_every_s=0.2),
                  tmp_path, answer=lambda e: "stop")
    assert [e["event"] for e in events] == ["setup", "eval", "done"]
    assert events[2]["steps"] == events[1]["steps"] and events[2]["train_s"] < 60


@pytest.mark.parametrize("change, message", [
    ({"peer": "pyg-magic"}, "peer 'pyg-magic' is not one of"),
    ({"fanouts": [5, 4]}, "fanouts must be a list of 3 (layers)"),
    ({"mode": "fit"}, "mode 'fit' is not train or check"),
    ({"layers": 0}, "layers must be an integer >= 1"),
    ({"problem": "/nonexistent/problem.npz"}, "is not a file"),
    ({"budget_s": None}, "budget_s must be a number"),
], ids=["peer", "fanouts", "mode", "layers", "problem", "budget"])
def test_bad_job_is_one_line_and_exit_2(problem, tmp_path, change, message):
    """Checked before any peer library loads: gnndist's own python runs it."""
    job = {**_job(problem[0], tmp_path, "pyg-neighbor", "train"), **change}
    (tmp_path / "job.json").write_text(json.dumps(job))
    r = subprocess.run([sys.executable, str(MINIBATCH), str(tmp_path / "job.json")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr


def test_bad_job_missing_key(problem, tmp_path):
    job = _job(problem[0], tmp_path, "pyg-cluster", "train")
    del job["num_parts"]
    (tmp_path / "job.json").write_text(json.dumps(job))
    r = subprocess.run([sys.executable, str(MINIBATCH), str(tmp_path / "job.json")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == f"minibatch: job {tmp_path / 'job.json'}: missing num_parts"


def test_graphbolt_patch_makes_the_import_optional(tmp_path):
    """dgl 2.1.0's graphbolt ``__init__``, reduced to its shape: after the patch a failing body leaves
    ``IMPORT_ERROR`` instead of raising; patching twice changes nothing."""
    pkg = tmp_path / "gbprobe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Graphbolt."""\nimport os\n\nimport torch\n\nfrom .base import *\n\n\n'
                                     'def load_graphbolt():\n    """Load."""\n    raise FileNotFoundError("x")\n\n\n'
                                     'load_graphbolt()\n')
    (pkg / "base.py").write_text("import torchdata_is_not_installed\n")
    peer_env.patch_graphbolt(pkg / "__init__.py")
    once = (pkg / "__init__.py").read_text()
    assert "already patched" in peer_env.patch_graphbolt(pkg / "__init__.py")
    assert (pkg / "__init__.py").read_text() == once
    r = subprocess.run([sys.executable, "-c", "import gbprobe; print(gbprobe.IMPORT_ERROR)"],
                       env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "torchdata_is_not_installed" in r.stdout, r.stderr


def test_installed_reads_the_stamp_and_installs_nothing(tmp_path):
    """None until every step is recorded; then the probe's versions and reasons, the install's reason first."""
    venv = tmp_path / "venv"
    assert peer_env.installed(venv) is None  # no folder
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    steps = {name: {"ok": True, "s": 0.0, "detail": ""} for name, _ in peer_env.STEPS[:-1]}
    (venv / peer_env.STAMP).write_text(json.dumps({"recipe": peer_env.RECIPE, "steps": steps}))
    assert peer_env.installed(venv) is None  # the probe has not run
    steps["probe"] = {"ok": True, "s": 1.0, "detail": {"versions": {"torch": "2.13.0"},
                                                       "unavailable": {"dgl-neighbor": "ImportError: no dgl"}}}
    (venv / peer_env.STAMP).write_text(json.dumps({"recipe": peer_env.RECIPE, "steps": steps}))
    env = peer_env.installed(venv)
    assert env.python == venv / "bin" / "python" and env.versions == {"torch": "2.13.0"}
    assert env.available == ("pyg-neighbor", "pyg-cluster")
