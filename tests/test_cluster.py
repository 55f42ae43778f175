"""The emulated cluster (``benchmarks/emulated_cluster.py``): hosts as network namespaces with shaped links, one
torchrun agent each, running the product's own command; nothing left behind, whether the job succeeds or fails.
And the interface gloo is given in a job spanning hosts (:func:`gnndist.dist.join.gloo_interface`)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnndist import machine
from gnndist.dist.join import gloo_interface
from gnndist.errors import UserError
from gnndist.machine import interface_addresses, route_source

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark_module(name: str):
    """A module of ``benchmarks/`` (not installed: the emulated cluster needs root, ``ip`` and ``tc``)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look up their own module
    spec.loader.exec_module(module)
    return module


cluster = _benchmark_module("emulated_cluster")

needs_hosts = pytest.mark.skipif(cluster.why_not() is not None, reason=str(cluster.why_not()))


def test_rates_dilation_and_refusals():
    assert cluster._burst("1mbit") == f"{64 * 1024}b" and cluster._burst("100mbit") == "125000b"  # 10 ms of traffic
    with pytest.raises(UserError, match="tc's units"):
        cluster._burst("fast")
    assert cluster.dilation(16, 1, cores=2) == 8.0 and cluster.dilation(1, 1, cores=2) == 1.0
    # from a named cluster to the rate shaped here: its links over (dilation x its ranks' speed-up over a core)
    assert cluster.rate_for("800mbit", 16, 1, cores=2) == "100000kbit"
    assert cluster.rate_for("25gbit", 4, 4, speedup=40, cores=2) == "78125kbit"  # 4 x 4 GPUs, 40x a core, on 25 GbE
    assert cluster.rate_for("100mbit", 1, 1, cores=2) == "100000kbit"  # no dilation with a core per rank
    for bad in ("fast", "mbit", "-5mbit"):
        with pytest.raises(UserError, match="tc's units"):
            cluster.rate_for(bad, 4, 1)
    with pytest.raises(UserError, match="positive multiple"):
        cluster.rate_for("1gbit", 4, 1, speedup=0)
    with pytest.raises(UserError, match="1-250 hosts"):
        cluster.EmulatedCluster(0)


def fake_host(monkeypatch, named: list[str], routes_from: str = "10.0.0.2"):
    """This host as ``vm`` (resolving to ``named``) with ``lo`` and ``eth0`` 10.0.0.2; routes leave from
    ``routes_from``."""
    monkeypatch.setattr(machine.socket, "gethostname", lambda: "vm")
    monkeypatch.setattr(machine, "interface_addresses", lambda: {"lo": "127.0.0.1", "eth0": "10.0.0.2"})
    monkeypatch.setattr(machine, "route_source", lambda addr: routes_from)
    monkeypatch.setattr(machine, "resolve_ipv4", lambda name: {"vm": named, "head": ["10.0.0.1"]}.get(name, [name]))


def test_gloo_is_given_the_interface_toward_the_master_where_the_name_is_loopback(monkeypatch):
    fake_host(monkeypatch, ["127.0.0.1"])
    choice = gloo_interface("head")
    assert (choice.name, choice.address) == ("eth0", "10.0.0.2")
    assert choice.line() == ("gloo binds eth0 (10.0.0.2), this host's way to MASTER_ADDR head: its name 'vm' "
                             "resolves to 127.0.0.1, which other hosts cannot reach (GLOO_SOCKET_IFNAME overrides)")
    fake_host(monkeypatch, [])  # a name that does not resolve at all
    assert gloo_interface("head").line().count("resolves to no address") == 1
    fake_host(monkeypatch, ["10.9.9.9"])  # resolves to an address that is not this host's (stale DNS)
    assert gloo_interface("head").name == "eth0"


def test_gloo_keeps_its_own_choice_where_it_works(monkeypatch):
    fake_host(monkeypatch, ["127.0.0.1", "10.0.0.2"])  # the name reaches eth0: gloo's choice works
    assert gloo_interface("head") is None
    fake_host(monkeypatch, ["127.0.0.1"])
    assert gloo_interface("head", "ib0") is None  # the user's (GLOO_SOCKET_IFNAME)
    assert gloo_interface("127.0.0.1") is None  # one machine
    assert gloo_interface(None) is None
    fake_host(monkeypatch, ["127.0.0.1"], routes_from="127.0.0.1")  # the master is reached over loopback
    assert gloo_interface("head") is None
    fake_host(monkeypatch, ["127.0.0.1"], routes_from=None)  # no route
    assert gloo_interface("head") is None


def test_this_machines_interfaces_and_routes_are_read():
    assert interface_addresses().get("lo") == "127.0.0.1"
    assert route_source("127.0.0.1") == "127.0.0.1"
    assert route_source("not an address") is None


@needs_hosts
def test_two_hosts_train_and_leave_nothing_behind(part2, tmp_path):
    with cluster.EmulatedCluster(2, 1, "1gbit") as c:
        tag = c.tag
        assert set(cluster.leftovers(tag)) == {*c.names, c.switch, *(f"/etc/netns/{n}" for n in c.names)}
        shaped = subprocess.run(["ip", "netns", "exec", c.names[1], "tc", "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True).stdout
        assert "tbf" in shaped and "rate 1Gbit" in shaped
        ok = c.run(["train", str(part2), "--epochs", "2", "--no-progress", "--strategy", "1d"],
                   env={"GNNDIST_DATA": str(tmp_path)}, timeout=240)
        failed = c.run(["train", str(tmp_path / "missing")], env={"GNNDIST_DATA": str(tmp_path)}, timeout=240)
        logs = list(c._logs)
    assert [r.returncode for r in ok] == [0, 0], [r.stderr[-2000:] for r in ok]
    assert "toy: gcn on 2 rank(s)" in ok[0].stdout
    # the hosts' name is this machine's, which resolves to loopback here: the product chose the link, in one line
    assert ok[0].stderr.count("gnndist: gloo binds eth0 (") == 1 and "gloo binds" not in ok[1].stderr
    assert not [r for r in ok if "hostname of the client socket" in r.stderr]  # names for every address
    assert all(r.returncode not in (0, None) for r in failed)
    assert "is not a gnndist partition directory" in failed[0].stderr
    assert cluster.leftovers(tag) == []
    assert len(logs) == 8 and not [n for n in logs if os.path.exists(n)]  # the agents' output files: gone
    stray = subprocess.run(["pgrep", "-f", f"gdc{tag}-"], capture_output=True, text=True).stdout.split()
    assert stray == []
