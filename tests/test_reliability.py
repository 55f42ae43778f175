"""Reliability: signals to the launcher, dead peers, checkpoints (atomic, resumable, bit-for-bit), NaN guard, restarts.

Every run is a real ``gnndist`` (or ``torchrun``) process on gloo CPU ranks; ``ps`` checks that
no rank outlives its launcher.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from gnndist.datasets import synthetic
from gnndist.partition import partition

from gnndist.cli import main
from gnndist.machine import free_port
from gnndist.testing import QUICK_PARTITION
from gnndist.training.trainer import Trainer

GNNDIST = [sys.executable, "-m", "gnndist.cli"]
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    return {**env, **(extra or {})}


def _wait_for(cond, proc, timeout=90.0):
    t0 = time.monotonic()
    while not cond():
        assert proc.poll() is None, f"exited early ({proc.returncode}): {proc.communicate()[1][-2000:]}"
        assert time.monotonic() - t0 < timeout, "timed out waiting for training to start"
        time.sleep(0.05)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _group_alive(pgid: int) -> list[str]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if int(line.split()[1]) == pgid and not line.split()[2].startswith("Z")]


def _losses(log: Path) -> dict[int, float]:
    return {row["epoch"]: row["loss"] for row in map(json.loads, log.read_text().splitlines())}


# ---------------------------------------------------------------------- signals
@pytest.mark.parametrize("sig, to_group, code, line", [
    (signal.SIGTERM, False, 143, "gnndist: stopped by SIGTERM; all 2 ranks stopped"),
    # Ctrl-C on a terminal (SIGINT to the launcher alone takes SIGTERM's forwarding and this case's message)
    (signal.SIGINT, True, 130, "gnndist: interrupted; all 2 ranks stopped"),
], ids=["sigterm", "ctrl-c-group"])
def test_signal_stops_every_rank(part2, tmp_path, sig, to_group, code, line):
    log = tmp_path / "log.jsonl"
    p = subprocess.Popen(GNNDIST + ["train", str(part2), "--ranks", "2", "--epochs", "100000", "--no-progress",
                                    "--log-file", str(log)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        _wait_for(lambda: _lines(log) >= 3, p)
        assert len(_group_alive(p.pid)) >= 3  # the launcher and its two ranks
        os.killpg(p.pid, sig) if to_group else p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert p.returncode == code
        assert err.strip().splitlines() == [line]
        deadline = time.monotonic() + 0.5  # what is left of the group has half a second to go
        while _group_alive(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _group_alive(p.pid) == []
    finally:
        if _group_alive(p.pid):
            os.killpg(p.pid, signal.SIGKILL)


# ---------------------------------------------------------------------- dead peers
def test_killed_peer_makes_the_survivor_exit_within_the_timeout(part2, tmp_path):
    port, log = free_port(), tmp_path / "log.jsonl"
    procs = []
    for rank in range(2):
        env = _env({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        argv = ["train", str(part2), "--epochs", "100000", "--no-progress", "--timeout", "5"]
        procs.append(subprocess.Popen(GNNDIST + argv + (["--log-file", str(log)] if rank == 0 else []), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    try:
        _wait_for(lambda: _lines(log) >= 3, procs[0])
        procs[1].kill()
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
        assert time.monotonic() - t0 < 5 + 10
        assert procs[0].returncode == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("gnndist: error: rank 0: ") and "failed: a peer rank died" in lines[0]
        assert any(op in lines[0] for op in ("all_reduce", "all_to_all", "broadcast", "collective")), lines[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---------------------------------------------------------------------- checkpoints
def test_resume_skips_a_corrupt_newest_and_continues_bit_for_bit(part1, tmp_path, capsys):
    ck = tmp_path / "ck"
    flags = ["train", str(part1), "--epochs", "8", "--no-progress", "--json"]
    assert main(flags + ["--log-file", str(tmp_path / "straight.jsonl")]) == 0
    straight = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(flags + ["--checkpoint", str(ck), "--checkpoint-every", "2", "--keep-checkpoints", "3"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in ck.iterdir()) == ["best.pt", "ckpt-000003.pt", "ckpt-000005.pt",
                                                    "ckpt-000007.pt"]  # the newest 3 kept
    state = torch.load(ck / "ckpt-000005.pt", weights_only=True)
    assert {"model", "optim", "epoch", "best", "rng", "config"} <= set(state) and state["epoch"] == 5
    (ck / "ckpt-000007.pt").write_bytes((ck / "ckpt-000007.pt").read_bytes()[:1000])  # a truncated newest
    next(iter(state["model"].values())).view(-1)[0] += 1.0  # a silent bit flip: the file still loads
    torch.save(state, ck / "ckpt-000005.pt")
    log = tmp_path / "resumed.jsonl"
    assert main(flags + ["--checkpoint", str(ck), "--resume", "--log-file", str(log)]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(_losses(log)) == [4, 5, 6, 7]  # from ckpt-000003, the newest good one
    assert _losses(log) == {e: v for e, v in _losses(tmp_path / "straight.jsonl").items() if e >= 4}  # bit for bit
    for key in ("final_loss", "train_acc", "val_acc", "test_acc", "best_epoch"):
        assert resumed[key] == straight[key], key


KILL_MID_WRITE = """
import os, signal, sys, torch
real = torch.save
def save(obj, f, *a, **k):
    if isinstance(obj, dict) and obj.get("epoch") == 5:  # the third checkpoint: half of it, then SIGKILL
        import io
        buf = io.BytesIO(); real(obj, buf, *a, **k)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2]); f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real(obj, f, *a, **k)
torch.save = save
from gnndist.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one(part1, tmp_path, capsys):
    ck = tmp_path / "ck"
    flags = ["train", str(part1), "--epochs", "7", "--no-progress", "--json", "--checkpoint", str(ck),
             "--checkpoint-every", "2"]
    r = subprocess.run([sys.executable, "-c", KILL_MID_WRITE, *flags], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -signal.SIGKILL
    names = sorted(p.name for p in ck.iterdir())
    assert [n for n in names if n.startswith("ckpt-")] == ["ckpt-000001.pt", "ckpt-000003.pt"]
    assert any(n.startswith(".ckpt-000005.pt.") and n.endswith(".tmp") for n in names)  # the partial write, aside
    assert torch.load(ck / "ckpt-000003.pt", weights_only=True)["epoch"] == 3
    capsys.readouterr()
    assert main(flags[:6]) == 0
    straight = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(flags + ["--resume"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert not any(p.name.startswith(".") for p in ck.iterdir())  # the partial file is cleaned up
    assert (straight["final_loss"], straight["test_acc"]) == (resumed["final_loss"], resumed["test_acc"])


# ---------------------------------------------------------------------- numerical guard
@pytest.mark.parametrize("where", ["loss", "grad"])
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(part1, tmp_path, capsys, monkeypatch, where):
    if where == "loss":
        from gnndist.tasks import NodeTask

        real = NodeTask.objective
        monkeypatch.setattr(NodeTask, "objective", lambda self, logits: real(self, logits) * (
            float("nan") if self.graph.context.current.epoch == 3 else 1.0))
    else:
        real = Trainer.allreduce_grads

        def poisoned(self, overflow=False):
            flagged = real(self, overflow)
            if self.graph.context.current.epoch == 3:
                self.model.convs[1].lin.weight.grad[0, 0] = float("inf")
            return flagged

        monkeypatch.setattr(Trainer, "allreduce_grads", poisoned)
    ck = tmp_path / "ck"
    assert main(["train", str(part1), "--epochs", "10", "--no-progress", "--checkpoint", str(ck)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnndist: error: epoch 3: "), err
    assert ("the loss is nan" if where == "loss" else "the gradient of convs.1.lin.weight is not finite") in err[0]
    assert f"the last good checkpoint is {ck / 'ckpt-000002.pt'}" in err[0]
    assert max(p.name for p in ck.glob("ckpt-*.pt")) == "ckpt-000002.pt"
    assert torch.load(ck / "ckpt-000002.pt", weights_only=True)["epoch"] == 2


# ---------------------------------------------------------------------- elastic restart
@pytest.fixture(scope="module")
def part2_slow(tmp_path_factory):
    d = tmp_path_factory.mktemp("p2s")
    partition(synthetic(3000, avg_degree=8, num_classes=4, num_features=32, seed=3), 2,
              **QUICK_PARTITION).save(d, dataset="toy")
    return d


@pytest.fixture(scope="module")
def straight_slow(part2_slow):
    """The uninterrupted run the restarted ones must equal (a reference: on pooled ranks, in this process)."""
    import contextlib
    import io

    from gnndist.testing import pooled_launches

    out = io.StringIO()
    with pooled_launches(), contextlib.redirect_stdout(out):
        assert main(["train", str(part2_slow), "--ranks", "2"] + SLOW_FLAGS) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])


SLOW_FLAGS = ["--epochs", "20", "--no-progress", "--json"]  # killed after epoch 4: 15 epochs to resume


def _children(pid: int) -> list[tuple[int, str]]:
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True)
    return [(int(line.split()[0]), line) for line in out.stdout.splitlines()]


def _ranks_of(launcher: int) -> list[int]:
    """The rank processes of a launcher: torchrun's children running gnndist.cli, or the children of the
    forkserver that ``--ranks`` forks them from (multiprocessing's resource tracker is neither)."""
    ranks = []
    for pid, args in _children(launcher):
        if "gnndist.cli" in args or "spawn_main" in args:
            ranks.append(pid)
        elif "forkserver" in args:
            ranks += [child for child, _ in _children(pid)]
    return ranks


@pytest.mark.parametrize("launcher", ["torchrun", "nproc"])
def test_restart_after_a_killed_rank_resumes_to_the_same_metrics(part2_slow, straight_slow, tmp_path, launcher):
    ck = tmp_path / "ck"
    train = ["train", str(part2_slow), *SLOW_FLAGS, "--checkpoint", str(ck), "--checkpoint-every", "5"]
    if launcher == "torchrun":
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
        argv = [torchrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "-m", "gnndist.cli", *train]
    else:
        argv = GNNDIST + train + ["--ranks", "2", "--max-restarts", "1"]
    p = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (ck / "ckpt-000004.pt").is_file(), p)
        ranks = _ranks_of(p.pid)
        assert len(ranks) == 2, ranks
        os.kill(ranks[-1], signal.SIGKILL)
        out, err = p.communicate(timeout=180)
    finally:
        p.kill()
    assert p.returncode == 0, err[-3000:]
    assert "resumed from" in err or "resumed from" in out  # the restarted group read a checkpoint: not from scratch
    resumed = json.loads(out.strip().splitlines()[-1])
    for key in ("final_loss", "train_acc", "val_acc", "test_acc", "best_epoch"):
        assert resumed[key] == straight_slow[key], key
