"""One value for the job: ranks handed different inputs of ``auto``'s decision (constants, a kept decision, a
clock) still take one decision per layer and train as one process; a rank reading another partition fails in
one line; a group whose peers never come, and any wait past ``--timeout``, ends the rank naming the place."""

import json
import logging
import threading
import time
from pathlib import Path

import pytest
import torch

from gnndist.config import TrainConfig
from gnndist.cost import Network
from gnndist.dist.grid import ProcessGrid
from gnndist.dist.guards import Watchdog, roll_call
from gnndist.dist.probe import cache_key, write_decision
from gnndist.errors import CollectiveDesync, PeerFailed, UserError
from gnndist.graph import DistGraph, meta_digest
from gnndist.launcher import place
from gnndist.machine import host_identity
from gnndist.strategies import Auto
from gnndist.testing import QUICK_PARTITION, assert_close, run_distributed
from gnndist.training.trainer import Trainer

EPOCHS = 3
# rank 0's constants model the four layouts of P = 4 close together (all timed); rank 1's make 1d the clear
# winner by far (a rank on its own would time nothing): the timing collectives would diverge
NETS = [Network("rank0", alpha=1e-6, beta=1e6, gamma_sparse=1e-9, gamma_dense=1e-11, overhead=1e-6),
        Network("rank1", alpha=1e3, beta=1e12, gamma_sparse=1e-9, gamma_dense=1e-11, overhead=1e3)]


class Ticks:
    """A clock each rank runs at its own speed (rank 1's 7x rank 0's)."""

    def __init__(self, rate: float):
        self.now, self.rate = 0.0, rate

    def __call__(self) -> float:
        self.now += self.rate
        return self.now


@pytest.fixture(scope="module")
def part4(tmp_path_factory):
    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    data = synthetic(240, avg_degree=7, num_classes=4, num_features=12, seed=3)
    parts = {}
    for p in (1, 4):  # the same graph: its 4 parts, and one part for the one-process reference
        parts[p] = tmp_path_factory.mktemp(f"p{p}")
        partition(data, p, **QUICK_PARTITION).save(parts[p], dataset="toy")
    return parts


def _train(graph: DistGraph, cfg: TrainConfig) -> dict:
    trainer = Trainer(graph, cfg)
    losses = []
    for epoch in range(EPOCHS):
        with graph.context.step(seed=cfg.run.seed, epoch=epoch):
            losses.append(trainer.train_step(epoch))
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    chosen = {tag: c["strategy"] + f"/{c['replication']}" for tag, c in graph.strategy.choices().items()}
    return {"losses": losses, "grads": grads, "chosen": chosen}


def _disagreeing_rank(grid, partdir: str, caches: str, cfg: TrainConfig) -> dict:
    """Each rank its own constants, its own probe file (rank 1's keeps "1d" for every layer) and its own clock."""
    cache = Path(caches) / f"rank{grid.rank}.json"
    auto = Auto(NETS[int(grid.rank == 1)], cache=cache, clock=Ticks(1.0 + 6.0 * (grid.rank == 1)))
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("gnndist").addHandler(handler)
    try:
        graph = DistGraph.load(partdir, grid, strategy=auto)  # built: the decisions' keys are known
        if grid.rank == 1:  # an earlier run's decisions, in this rank's file alone: 1d for every layer
            for width in range(1, 65):
                for backward in (True, False):
                    write_decision(cache, auto.decision_key(width, backward), "1d", {"1d": 1.0})
        out = _train(graph, cfg)
    finally:
        logging.getLogger("gnndist").removeHandler(handler)
    return {**out, "said": said}


def test_ranks_given_different_inputs_take_one_decision_and_train_as_one_process(part4, tmp_path):
    cfg = TrainConfig()
    cfg.model.hidden, cfg.model.dropout, cfg.model.normalize_features = 8, 0.0, False
    cfg.optim.epochs, cfg.run.progress = EPOCHS, False
    ranks = run_distributed(_disagreeing_rank, 4, str(part4[4]), str(tmp_path), cfg, timeout=240)
    one = _train(DistGraph.load(str(part4[1]), ProcessGrid()), cfg)
    assert all(r["chosen"] == ranks[0]["chosen"] for r in ranks) and ranks[0]["chosen"]  # one layout per layer
    said = " | ".join(ranks[0]["said"])
    assert "rank 1 (on " in said and "had another cost-model constants (" in said, said
    assert_close("losses", torch.tensor(one["losses"]), torch.tensor(ranks[0]["losses"]), rtol=1e-5)
    scale = max(g.abs().max().item() for g in one["grads"].values())
    for name, g in one["grads"].items():
        assert_close(f"grad {name}", g, ranks[0]["grads"][name], atol=1e-5 * scale)


def _other_partition(grid, partdir: str) -> str:
    from gnndist.partition import read_meta, read_part

    meta = read_meta(partdir)
    if grid.rank == 1:
        meta = {**meta, "dataset": "another"}  # as if this host saw another partition at the same path
    try:
        DistGraph(read_part(partdir, grid.rank, meta), meta, grid)
    except UserError as e:
        return str(e)
    return "no error"


def test_a_rank_that_reads_another_partition_fails_in_one_line(part2):
    said = run_distributed(_other_partition, 2, str(part2))
    assert said[0] == said[1] and "\n" not in said[0]
    assert said[0].startswith("rank 1 (on ") and "had another partition (META.json differs" in said[0]


def _groups_without_a_peer(grid, checked: bool) -> str:
    grid.timeout = 2.0  # seconds: the group's creation waits no longer than --timeout
    if not checked:
        grid.checker = None  # as without --check-collectives (the suite checks every collective)
    t0 = time.monotonic()
    try:
        if grid.rank == 1:  # rank 1 takes another path: it never creates the groups its peers wait for
            if checked:
                grid.barrier()
            return "left"
        grid.axes(2)
    except (PeerFailed, CollectiveDesync) as e:
        return f"{time.monotonic() - t0:.1f} {e}"
    return "no error"


def test_a_group_whose_peers_never_come_fails_within_the_timeout_naming_it():
    said = run_distributed(_groups_without_a_peer, 4, False, timeout=120)
    assert said[1] == "left"
    seconds, line = said[0].split(" ", 1)
    assert float(seconds) < 2.0 + 15.0 and "\n" not in line
    assert line.startswith("rank 0: creating the row (c=2) group of ranks [0, 1] failed within --timeout 2s")


def test_check_collectives_names_a_group_creation_that_diverges_at_once():
    said = run_distributed(_groups_without_a_peer, 4, True, timeout=120)
    seconds, line = said[0].split(" ", 1)
    assert float(seconds) < 2.0 and line.startswith("collectives diverged (--check-collectives): rank 0 entered ")
    assert "new_group on row/col c=2 from " in line and "but rank 1 entered call #" in line and "barrier" in line


def test_watchdog_leaves_a_wait_past_the_timeout_naming_it_and_its_caller():
    left, heard = [], []
    dog = Watchdog(3, timeout=0.05, on_stuck=heard.append, exit=left.append, poll=0.02)
    dog.GRACE = 0.05
    with dog.waiting("new_group row (c=2)"):
        with dog.waiting("nested: not the one named"):
            for _ in range(200):
                if left:
                    break
                time.sleep(0.01)
    dog.stop()
    assert left == [2] and len(heard) == 1
    assert heard[0].startswith("rank 3: stuck ") and "in new_group row (c=2) (from " in heard[0]
    assert "test_watchdog_leaves_a_wait_past_the_timeout_naming_it_and_its_caller" in heard[0]
    assert "past --timeout 0.05s: leaving the job" in heard[0]


def test_watchdog_is_quiet_within_the_timeout_and_outside_waits():
    left = []
    dog = Watchdog(0, timeout=60.0, exit=left.append, poll=0.01)
    with dog.waiting("barrier"):
        time.sleep(0.05)
    assert dog.what is None and dog.overdue(now=time.monotonic() + 1e6) is None  # no wait: nothing overdue
    done = threading.Event()
    threading.Thread(target=lambda: (dog.waiting("other thread").__enter__(), done.set())).start()
    done.wait(1.0)
    assert dog.what is None  # only the rank's own thread is watched
    dog.stop()
    assert left == []


def test_probe_cache_is_keyed_by_the_hosts_and_written_atomically(tmp_path):
    me = host_identity()
    one = cache_key([me] * 4, "cpu")
    two = cache_key([me] * 2 + ["other/10.0.0.2"] * 2, "cpu")
    wider = cache_key([me] * 2 + ["other/10.0.0.3"] * 2, "cpu")  # another network between the same counts
    assert one.startswith(me + "|") and one.endswith("|cpu|P=4")
    assert two.startswith("2 hosts x 2 (") and two != wider and two.endswith("|cpu|links 2|P=4")  # its probe's form
    path = tmp_path / "home" / "probe.json"
    write_decision(path, one, "1d", {"1d": 1.0})
    write_decision(path, two, "2d(2x2)", {"2d(2x2)": 0.5})
    table = json.loads(path.read_text())
    assert table[one]["keep"] == "1d" and table[two]["keep"] == "2d(2x2)"
    assert [p.name for p in path.parent.iterdir()] == ["probe.json"]  # no temporary file left
    blocked = tmp_path / "a-file" / "probe.json"  # a home that cannot be written: a warning, not a failure
    blocked.parent.write_text("")
    write_decision(blocked, wider, "1d", {})
    assert list(tmp_path.glob("**/*.tmp")) == []


def test_meta_digest_is_the_same_for_the_same_meta_in_any_key_order():
    assert meta_digest({"a": 1, "b": [1, 2]}) == meta_digest({"b": [1, 2], "a": 1})
    assert meta_digest({"a": 1}) != meta_digest({"a": 2})


def _probe_parts_of_different_sizes(grid):
    from gnndist.kernels import CSR

    from gnndist.dist.probe import probe

    n = 40 * (1 + 9 * grid.rank)  # rank 1's part has 10x the nonzeros of rank 0's
    row = torch.arange(n).repeat_interleave(3)
    col = (row + torch.tensor([1, 2, 3]).repeat(n)) % n
    net, _ = probe(grid, CSR.from_coo(row, col, n, n), repeats=3, rounds=2)
    return net


def test_the_probe_gives_every_rank_the_same_constants_whatever_its_part():
    """The cause of issue 51's hang: the SpMM constant was the slowest rank's time over each rank's own nonzeros,
    so the ranks of one job modelled the layouts differently and timed different candidates."""
    nets = run_distributed(_probe_parts_of_different_sizes, 2)
    assert nets[0] == nets[1]


def _roll_call_job(grid, silent: int):
    """Every rank but ``silent`` asks who can be heard; ``silent`` stays quiet (alive) until they are done."""
    import time

    if grid.rank == silent:
        time.sleep(3.0)
        return None
    return roll_call(grid, place(), wait=1.5)


def _roll_call_all(grid):
    return roll_call(grid, place(), wait=5.0)


def test_roll_call_names_the_ranks_not_heard():
    """After a failed collective the error names the ranks (and hosts) that never answered through the store."""
    said = run_distributed(_roll_call_job, 3, 1)
    assert said[1] is None
    for text in (said[0], said[2]):
        assert text.startswith("no word from rank 1 on ") and "within 1.5s" in text, text
    assert run_distributed(_roll_call_all, 2) == [None, None]  # everyone heard: nothing to add
