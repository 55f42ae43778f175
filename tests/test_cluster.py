"""The emulated cluster (``gnndist.bench.cluster``): hosts as network namespaces with shaped links, one torchrun
agent each, running the product's own command; nothing left behind, whether the job succeeds or fails."""

import os
import subprocess

import pytest

from gnndist.bench.cluster import EmulatedCluster, _burst, dilation, leftovers, why_not
from gnndist.errors import UserError

needs_hosts = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


def test_rates_dilation_and_refusals():
    assert _burst("1mbit") == f"{64 * 1024}b" and _burst("100mbit") == "125000b"  # 10 ms of traffic
    with pytest.raises(UserError, match="tc's units"):
        _burst("fast")
    assert dilation(16, 1, cores=2) == 8.0 and dilation(1, 1, cores=2) == 1.0
    with pytest.raises(UserError, match="1-250 hosts"):
        EmulatedCluster(0)


@needs_hosts
def test_two_hosts_train_and_leave_nothing_behind(part2, tmp_path):
    with EmulatedCluster(2, 1, "1gbit") as c:
        tag = c.tag
        assert set(leftovers(tag)) == {*c.names, c.switch}
        shaped = subprocess.run(["ip", "netns", "exec", c.names[1], "tc", "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True).stdout
        assert "tbf" in shaped and "rate 1Gbit" in shaped
        ok = c.run(["train", str(part2), "--epochs", "2", "--no-progress", "--strategy", "1d"],
                   env={"GNNDIST_DATA": str(tmp_path)}, timeout=240)
        failed = c.run(["train", str(tmp_path / "missing")], env={"GNNDIST_DATA": str(tmp_path)}, timeout=240)
        logs = list(c._logs)
    assert [r.returncode for r in ok] == [0, 0], [r.stderr[-2000:] for r in ok]
    assert "toy: gcn on 2 rank(s)" in ok[0].stdout
    assert all(r.returncode not in (0, None) for r in failed)
    assert "is not a gnndist partition directory" in failed[0].stderr
    assert leftovers(tag) == []
    assert len(logs) == 8 and not [n for n in logs if os.path.exists(n)]  # the agents' output files: gone
    stray = subprocess.run(["pgrep", "-f", f"gdc{tag}-"], capture_output=True, text=True).stdout.split()
    assert stray == []
