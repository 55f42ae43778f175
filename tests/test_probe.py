"""The probe (``gnndist.dist.probe``): rounds until two agree (a fake clock), and its cache: reused, re-probed with
``--reprobe`` or at another world size, bypassed by ``--network`` presets."""

import itertools
import json

import pytest
import torch
from gnndist.kernels import CSR

from gnndist.config import DistConfig
from gnndist.cost import Network
from gnndist.dist import probe as probe_mod
from gnndist.dist.grid import ProcessGrid
from gnndist.dist.probe import cache_key, probe, probed, read_cached, write_cached
from gnndist.errors import UserError
from gnndist.machine import host_identity
from gnndist.strategies import Auto

FAKE = Network("probe", 1e-5, 1e9, 1e-9, 1e-11, 2e-5, 1e-9, 1e-3)


def tiny_csr() -> CSR:
    row, col = torch.tensor([0, 0, 1, 2, 3]), torch.tensor([1, 2, 0, 3, 1])
    return CSR.from_coo(row, col, 4, 4)


def test_probe_stops_when_two_rounds_agree(monkeypatch):
    clock = itertools.count()  # every reading advances one "second": every timing is 1 s
    monkeypatch.setattr(probe_mod.time, "perf_counter", lambda: float(next(clock)))
    net, spread = probe(ProcessGrid(), tiny_csr(), repeats=3)
    assert spread == 0.0
    # one rank: 6 timings a round (tiny all-to-all, big all-to-all, SpMM, X @ W, elementwise, step),
    # each a warm-up call then 3 timed ones, two readings each (a 1 s call: one call per timing): 2 rounds
    assert next(clock) == 2 * 6 * (1 + 3) * 2
    assert net.alpha == 1.0 and net.overhead == 0.0 and net.beta == float("inf") and net.step_overhead == 1.0
    assert net.gamma_sparse == pytest.approx(1 / (5 * 32))
    assert net.gamma_dense == pytest.approx(1 / (2 * 2048 * 256 * 64))
    assert net.gamma_elem == pytest.approx(2.0**-20)


def test_probe_gives_up_after_its_rounds_and_reports_the_spread(monkeypatch):
    ticks = itertools.count()

    def clock() -> float:  # each round's timings take twice the previous round's
        n = next(ticks)
        return float(n * 2 ** (n // (6 * 4 * 2)))

    monkeypatch.setattr(probe_mod.time, "perf_counter", clock)
    _, spread = probe(ProcessGrid(), tiny_csr(), repeats=3, rounds=3)
    assert next(ticks) == 3 * 6 * 4 * 2 and spread > probe_mod.TOLERANCE


@pytest.fixture()
def fake_probe(monkeypatch):
    calls = []

    def fake(grid, csr=None, kernel=None):
        calls.append(grid.world_size)
        return FAKE, 0.02

    monkeypatch.setattr(probe_mod, "probe", fake)
    return calls


def test_cache_is_reused_and_reprobe_measures_again(tmp_path, fake_probe):
    path = tmp_path / "probe.json"
    said = []
    assert probed(ProcessGrid(), path, say=said.append) == FAKE
    assert fake_probe == [1] and "probed" in said[-1]
    entry = json.loads(path.read_text())[cache_key([host_identity()] * 1, "cpu")]
    assert entry["torch"] == torch.__version__ and entry["spread"] == 0.02 and entry["date"]
    assert probed(ProcessGrid(), path, say=said.append) == FAKE  # from the file: no probe
    assert fake_probe == [1] and "reused" in said[-1]
    assert probed(ProcessGrid(), path, reprobe=True) == FAKE
    assert fake_probe == [1, 1]


def test_another_world_size_or_an_unreadable_cache_probes(tmp_path, fake_probe):
    path = tmp_path / "probe.json"
    write_cached(path, cache_key([host_identity()] * 2, "cpu"), FAKE, 0.0)  # measured at P = 2
    assert read_cached(path, cache_key([host_identity()] * 2, "cpu")) == FAKE
    probed(ProcessGrid(), path)  # P = 1 here: not the same constants
    assert fake_probe == [1]
    assert set(json.loads(path.read_text())) == {cache_key([host_identity()] * k, "cpu") for k in (1, 2)}
    path.write_text("{not json")
    probed(ProcessGrid(), path)
    assert fake_probe == [1, 1]


def test_presets_and_flags_reach_auto(tmp_path):
    a = Auto.from_config(DistConfig(strategy="auto", network="ib", alpha=3e-6))
    assert a.network.name == "ib" and a.network.alpha == 3e-6  # a preset: nothing measured, nothing read
    a = Auto.from_config(DistConfig(strategy="auto", probe_cache=str(tmp_path / "p.json"), reprobe=True, beta=1e9))
    assert a.network is None and a.cache == tmp_path / "p.json" and a.reprobe and a.overrides == {"beta": 1e9}
    with pytest.raises(UserError, match="--reprobe"):
        DistConfig(strategy="1d", reprobe=True)


def test_constants_on_several_hosts_tell_the_links_apart():
    """On 2 hosts x 2 ranks the big all-to-all to a rank's own host gives ``beta`` (one peer's 256 KiB), the one
    to the other hosts ``beta_host`` (the host's link carries 2 ranks x 2 peers x 256 KiB); with one rank per host,
    nothing stays on a host and ``beta`` is a rank's rate to the others."""
    from gnndist.cost import host_index
    from gnndist.dist.probe import _BIG_PER_PEER, _constants

    peer = _BIG_PER_PEER * 4
    # the world's tiny all-to-all: overhead 0.5 ms + 3 peers x alpha; the pair's: overhead + 1 alpha (alpha 0.25 ms);
    # the tiny one to the other host's 2 ranks: overhead + 2 x alpha_host (alpha_host 2 ms)
    t = [1.25e-3, 0.75e-3, 1.25e-3 + peer / 2e9, 1e-9, 1e-3, 1e-3, 1e-3, 1.25e-3 + 4 * peer / 1e8, 4.5e-3]
    net = _constants(t, 4, host_index(["a", "a", "b", "b"]))
    assert net.beta == pytest.approx(2e9) and net.beta_host == pytest.approx(1e8)
    assert net.alpha == pytest.approx(0.25e-3) and net.overhead == pytest.approx(0.5e-3)
    assert net.alpha_host == pytest.approx(2e-3)
    t = [1e-3, 0.0, 0.0, 1e-9, 1e-3, 1e-3, 1e-3, 1e-3 + 3 * peer / 1e8, 1e-3]
    net = _constants(t, 4, host_index(["a", "b", "c", "d"]))
    assert net.beta == pytest.approx(1e8) and net.beta_host == pytest.approx(1e8)
    assert net.alpha_host == pytest.approx(net.alpha) == pytest.approx(1e-3 / 3)  # every peer elsewhere
    one = _constants(t[:2] + [1e-3 + 3 * peer / 5e8] + t[3:8] + [0.0], 4, host_index(["a"] * 4))
    assert one.beta == pytest.approx(5e8) and one.beta_host == 0.0 and one.alpha_host == 0.0


def test_a_one_level_probe_is_measured_again_on_several_hosts(tmp_path, fake_probe):
    """Constants stored before the probe told the hosts' links apart (no ``beta_host``) are not reused by a job on
    several hosts: the two-level model needs both."""
    grid = ProcessGrid()
    grid.hosts = ("vm/a", "vm/b")  # what a rank of a 2-host job sees (its collectives are a solo grid's here)
    cache = tmp_path / "probe.json"
    write_cached(cache, cache_key(grid.hosts, grid.device), FAKE, 0.01)
    assert probed(grid, cache) == FAKE and fake_probe == [1]
    grid.hosts = ("vm/a",)
    write_cached(cache, cache_key(grid.hosts, grid.device), FAKE, 0.01)
    assert probed(grid, cache) == FAKE and fake_probe == [1]  # one host: reused


def test_a_gpu_probe_times_layer_sized_products_and_is_stored_apart():
    """On a GPU the CPU's probe shapes time the launch, not the work (issue 50): a GPU times a big layer's
    product and multiply, and its stored results are keyed by that probe's form, so older ones are measured again."""
    from gnndist.dist.probe import probe_shapes

    (rows, f_in, f_out), elems = probe_shapes("cuda")
    (cpu_rows, cpu_in, cpu_out), cpu_elems = probe_shapes("cpu")
    assert rows * f_in * f_out >= 64 * cpu_rows * cpu_in * cpu_out and elems >= 64 * cpu_elems
    assert f_out == 128  # skinny, as a layer's X @ W
    assert probe_shapes("meta") == probe_shapes("cpu")
    me = host_identity()
    assert "|cuda|probe 2|P=2" in cache_key([me] * 2, "cuda") and "probe" not in cache_key([me] * 2, "cpu")


def test_a_stored_probe_is_measured_again_when_its_check_exchange_changed(tmp_path, fake_probe, monkeypatch):
    """The key names hosts and addresses, not the link's state (issue 47: a link shaped anew kept its key): a
    stored probe is reused while its check exchange times within CHECK_RATIO of the stored seconds."""
    grid = ProcessGrid()
    grid.world_size, grid.hosts = 2, ("vm/a", "vm/a")  # a 2-rank job's view; its collectives faked below
    monkeypatch.setattr(grid, "share", lambda obj: obj)
    timings = iter([0.010, 0.012, 0.050, 0.049])
    checked = []
    monkeypatch.setattr(probe_mod, "check_time", lambda g: checked.append(1) or next(timings))
    cache, said = tmp_path / "probe.json", []
    assert probed(grid, cache, say=said.append) == FAKE and fake_probe == [2]
    assert json.loads(cache.read_text())[cache_key(grid.hosts, "cpu")]["check_s"] == 0.010
    assert probed(grid, cache, say=said.append) == FAKE and fake_probe == [2] and "reused" in said[-1]  # 1.2x
    assert probed(grid, cache, say=said.append) == FAKE and fake_probe == [2, 2]  # 5x: measured again
    assert "no longer holds" in said[-2] and "50.00 ms" in said[-2] and "10.00 ms" in said[-2]
    assert json.loads(cache.read_text())[cache_key(grid.hosts, "cpu")]["check_s"] == 0.049
    write_cached(cache, cache_key(grid.hosts, "cpu"), FAKE, 0.01)  # an older entry, without a check: reused
    n = len(checked)
    assert probed(grid, cache) == FAKE and fake_probe == [2, 2] and len(checked) == n


def _check_job(grid):
    from gnndist.dist.probe import check_time

    return check_time(grid, repeats=1)


def test_the_check_exchange_is_timed_alike_on_every_rank():
    """Collective, the slowest rank's: every rank takes the same reuse-or-probe branch."""
    from gnndist.testing import run_distributed

    a, b = run_distributed(_check_job, 2)
    assert a == b > 0


def _probe_on_two_hosts(grid):
    from gnndist.dist.probe import probe

    grid.hosts = ("vm/a", "vm/b")  # as two hosts of one rank each would see the job
    return probe(grid, tiny_csr(), repeats=3, rounds=2)[0]


def test_a_probe_on_two_hosts_times_the_other_hosts_messages_and_link():
    """The collective rounds of several hosts (issue 47 item 3): ``alpha_host`` and ``beta_host`` measured, the
    same on every rank."""
    from gnndist.testing import run_distributed

    a, b = run_distributed(_probe_on_two_hosts, 2)
    assert a == b and a.alpha_host > 0 and a.beta_host > 0


class _Link:
    """A stand-in grid on a link of ``rate`` bytes/s and 1 ms latency: its all-to-all records the elements sent."""

    device = torch.device("cpu")

    def __init__(self, rate: float):
        self.rate, self.sent = rate, 0

    def all_reduce_(self, t, op="sum"):
        return t

    def all_to_all_single(self, out, inp, out_sizes=None, in_sizes=None, axis=None):
        self.sent = sum(in_sizes)

    def seconds(self) -> float:
        return 1e-3 + self.sent * 4 / self.rate


def test_the_exchange_across_hosts_grows_until_it_lasts(monkeypatch):
    """A link's buffers pass a short exchange faster than its rate, so the probe's exchange across hosts grows
    from 256 KiB per peer until it lasts ``_FAR_SECONDS`` (or reaches its cap); ``beta_host`` is then computed
    over the bytes it sent."""
    from gnndist.cost import host_index
    from gnndist.dist.probe import _BIG_PER_PEER, _FAR_MAX_ELEMS, _FAR_SECONDS, _constants, far_per_peer

    def fake_timer(grid, repeats):
        return lambda fn, local=False: (fn(), grid.seconds())[1]

    monkeypatch.setattr(probe_mod, "_timer", fake_timer)
    far = [0, 1, 1, 1]  # this rank's three peers on other hosts
    slow = _Link(1e8)
    per = far_per_peer(slow, far)
    assert per > _BIG_PER_PEER and slow.seconds() >= _FAR_SECONDS  # the last one timed lasted
    assert 1e-3 + per // 2 * 3 * 4 / 1e8 < _FAR_SECONDS  # half of it would not have
    fast = _Link(1e12)
    assert far_per_peer(fast, far) == _FAR_MAX_ELEMS // 3  # capped: 64 MiB from the busiest rank
    crawl = _Link(1e6)
    assert far_per_peer(crawl, far) == _BIG_PER_PEER  # 256 KiB already lasts: nothing grows on a slow link
    # beta_host over the bytes sent: 4 hosts x 1 rank, each link 3 peers x per x 4 B in the time past the world's
    t_world = 1e-3
    t = [t_world, 0.0, 0.0, 1e-9, 1e-3, 1e-3, 1e-3, t_world + 3 * per * 4 / 1e8, 1e-3, float(per)]
    net = _constants(t, 4, host_index(["a", "b", "c", "d"]))
    assert net.beta_host == pytest.approx(1e8) and net.beta == pytest.approx(1e8)
