"""``auto`` on measured ground: candidates the model cannot tell apart are timed (a fake clock) and the faster
kept; the decision is remembered, so the next run on the same partition and machine keeps it."""

import logging
from types import SimpleNamespace

import pytest
import torch

from gnndist.cost import Network, RankLoad
from gnndist.dist.grid import ProcessGrid
from gnndist.graph import DistGraph
from gnndist.strategies import Auto, BlockStrategy
from gnndist.strategies.auto import TIMED_CALLS, decide, decision_line, decision_report, settle

NET = Network("hand", alpha=1e-5, beta=1e9, gamma_sparse=1e-9, gamma_dense=1e-11, overhead=1e-5)


def test_settle_times_only_the_candidates_within_the_error():
    seen = []

    def measure(k: int) -> float:
        seen.append(k)
        return {0: 5.0, 1: 3.0}[k]

    assert settle([1.0, 1.1, 2.0], 0.25, measure) == (1, {0: 5.0, 1: 3.0})  # the measured faster wins
    assert seen == [0, 1]  # 2.0 is outside the band: never timed

    def never(k: int) -> float:
        raise AssertionError("a clear winner is not timed")

    assert settle([1.0, 1.5, 2.0], 0.25, never) == (0, {})
    assert settle([1.0], 0.25, never) == (0, {})


def test_decide_is_pure_no_process_no_file():
    """The decision alone: every rank's counts and a width in, the layout out; timing only the near candidates,
    an earlier decision kept when it names a candidate. No process group, no file, no layout built."""
    heavy = [RankLoad(expand_send=900, expand_recv=900, messages=3, nnz=50, rows=5)] * 2  # 2 ranks
    light = [RankLoad(expand_send=3, expand_recv=3, messages=1, nnz=50, rows=5)] * 2
    names = ["1d", "2d(2x2)"]

    def never(k: int) -> float:
        raise AssertionError("a clear winner is not timed")

    d = decide([heavy, light], names, 16, True, NET, 4, 0.25, None, never)
    assert (d.best, d.measured, d.remembered) == (1, {}, False) and d.modelled[1] < d.modelled[0]
    forward = decide([heavy, light], names, 16, False, NET, 4, 0.25, None, never)  # no backward: half the time
    assert forward.modelled == [t * 0.5 for t in d.modelled]

    timed = decide([light, light], names, 16, True, NET, 4, 0.25, None, {0: 2.0, 1: 1.0}.get)  # modelled alike
    assert (timed.best, timed.measured, timed.remembered) == (1, {0: 2.0, 1: 1.0}, False)

    kept = {"keep": "1d", "measured": {"1d": 0.5, "2d(2x2)": 0.7}}
    again = decide([light, light], names, 16, True, NET, 4, 0.25, kept, never)
    assert (again.best, again.measured, again.remembered) == (0, {0: 0.5, 1: 0.7}, True)
    stale = decide([heavy, light], names, 16, True, NET, 4, 0.25, {"keep": "1.5d(c=2)", "measured": {}}, never)
    assert (stale.best, stale.remembered) == (1, False)  # a decision naming no candidate is ignored

    report = decision_report(timed, names, [light, light], 16, 4, BlockStrategy(), NET)
    assert report["candidates"]["1d"]["measured_time_s"] == 2.0 and report["network"] == NET.as_dict()
    line = decision_line("layer0", 16, "2d(2x2)", report, timed, names, 0.25)
    assert line.startswith("auto: layer0 (F=16) -> 2d(2x2)  [1d ") and "within the timing band (25 %)" in line


class Clock:
    """A fake clock that the fake layouts advance by their own seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Fake(BlockStrategy):
    """A layout whose SpMM call takes ``seconds`` on the fake clock."""

    def __init__(self, name: str, seconds: float, clock: Clock):
        super().__init__()
        self.name, self.seconds, self.clock, self.calls = name, seconds, clock, 0
        self.block = SimpleNamespace(n_owned=5)

    def spmm(self, x, tag):
        self.calls += 1
        self.clock.now += self.seconds
        return x * 2.0


def _auto(part1, cache, clock, seconds, reprobe=False) -> tuple[Auto, list[Fake], DistGraph]:
    a = Auto(NET, cache=cache, reprobe=reprobe, error=0.25, clock=clock)
    g = DistGraph.load(part1, ProcessGrid(), strategy=a)  # builds auto on one rank
    fakes = [Fake(name, t, clock) for name, t in zip(("slow", "fast"), seconds)]
    a.options = fakes
    a.loads = [[RankLoad(expand_send=3, expand_recv=3, messages=1, nnz=50, rows=5)]] * 2  # modelled alike
    return a, fakes, g


def test_near_candidates_are_timed_and_the_faster_kept_once(part1, tmp_path, caplog):
    cache, clock = tmp_path / "probe.json", Clock()
    a, (slow, fast), g = _auto(part1, cache, clock, (2.0, 1.0))
    x = torch.ones(5, 4, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="gnndist"):
        assert a.choose("layer0", 4) is fast
        assert a.choose("layer0", 4) is fast  # decided once per layer
    assert slow.calls == fast.calls == 1 + TIMED_CALLS  # one untimed call, then the timed ones, each
    rep = a.choices()["layer0"]["candidates"]
    assert rep["slow"]["measured_time_s"] == 2.0 and rep["fast"]["measured_time_s"] == 1.0
    assert sum("within the timing band" in r.getMessage() for r in caplog.records) == 1
    assert torch.equal(a.spmm(x, "layer0"), 2 * x)

    # the next run on the same partition and machine: the clock now favours "slow", the decision stands
    b, (slow2, fast2), _ = _auto(part1, cache, Clock(), (0.5, 1.0))
    assert b.choose("layer0", 4) is fast2 and slow2.calls == fast2.calls == 0
    # another width is another decision; --reprobe measures again
    assert b.choose("layer1", 8) is slow2
    c, (slow3, _), _ = _auto(part1, cache, Clock(), (0.5, 1.0), reprobe=True)
    assert c.choose("layer0", 4) is slow3


def test_a_clear_winner_is_not_timed(part1, tmp_path):
    a, (slow, fast), _ = _auto(part1, tmp_path / "probe.json", Clock(), (2.0, 1.0))
    a.loads = [a.loads[0], [RankLoad(expand_send=3, expand_recv=3, messages=100, nnz=50, rows=5)]]  # 100 peers
    assert a.choose("layer0", 4) is slow and slow.calls == fast.calls == 0
    assert not (tmp_path / "probe.json").exists()
    assert "measured_time_s" not in a.choices()["layer0"]["candidates"]["slow"]


@pytest.mark.parametrize("backward", [True, False])
def test_near_candidates_are_timed_with_or_without_backward(part1, backward):
    clock = Clock()
    a, (slow, fast), _ = _auto(part1, None, clock, (2.0, 1.0))
    assert a.choose("layer0", 4, backward=backward) is fast
    assert slow.calls == fast.calls == 1 + TIMED_CALLS
