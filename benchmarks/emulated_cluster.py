"""A cluster in a box: H emulated hosts on this machine, each a network namespace with one shaped link.

A benchmark's module, not the installed package's (it needs root, ``ip`` and ``tc``): ``cluster.py`` and
``cluster_sweep.py`` beside it import it, and ``tests/test_cluster.py`` loads it from here.

    with EmulatedCluster(hosts=16, rate="100mbit") as c:       # needs root, `ip` and `tc`
        results = c.run(["train", "parts/", "--strategy", "auto"], env={"GNNDIST_DATA": "/shared"}, timeout=900)

The hosts hang off one bridge inside a "switch" namespace of their own (no address is given outside the
namespaces made here). Host ``k`` is the namespace ``gdc<tag>-h<k>`` with link ``eth0`` at ``10.77.<n>.<k+1>/16``;
its traffic is shaped both ways by ``tc tbf`` (the host's egress on ``eth0``, its ingress on the switch's port),
at ``rate`` (``tc``'s units: ``100mbit``, ``1gbit``; ``None``: unshaped). Latency needs netem, which this kernel
lacks: the link has the bridge's own (tens of microseconds). :meth:`EmulatedCluster.run` starts one ``torchrun``
agent per host (``--nnodes H --nproc-per-node G``, c10d rendezvous on host 0's address) running ``gnndist <args>``: the
product's own command, as on a cluster. As on many images, the hosts' shared name (this machine's) resolves to a
loopback address, so gloo's interface is the product's choice (:func:`gnndist.dist.join.gloo_interface`), not
set here; each namespace has an ``/etc/hosts`` of its own (``/etc/netns/<namespace>/hosts``, which ``ip netns
exec`` puts in place) naming every host's address ``gdc<tag>-h<k>`` (also IPv6-mapped), so the c10d store's
reverse lookups of its clients succeed as on a cluster with DNS. Everything is torn
down on exit, Ctrl-C, SIGTERM or failure: every process left in a namespace is killed and the namespaces (with
their links) deleted.

Cores: each host runs on its share of this machine's cores (:func:`host_cores`; one core shared by several hosts
when there are more hosts than cores), so its ranks start as many threads as a host of that many cores would.
Time dilation: the H x G ranks share this machine's cores, so compute runs H x G / cores times slower than on a
host of its own, while each link keeps its rate. A run at ``rate`` R therefore stands for a cluster whose links
carry R x H x G / cores per unit of its compute: 16 hosts x 1 rank on 2 cores at 100 Mbit/s is a cluster of one
core per host on 800 Mbit/s links (:func:`dilation`); :func:`rate_for` goes the other way, from a named cluster
(its links, and how much faster its ranks compute than a core here) to the rate to shape.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gnndist.errors import UserError

PORT = 29531  # c10d rendezvous on host 0


def dilation(hosts: int, ranks_per_host: int, cores: int | None = None) -> float:
    """How many times slower each rank computes here than on cores of its own (ranks over this machine's cores)."""
    return max(1.0, hosts * ranks_per_host / (cores or os.cpu_count() or 1))


def bits_per_second(rate: str) -> float:
    """A link rate in tc's units (``100mbit``, ``25gbit``, ``12500kbit``) in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    r = rate.lower().strip()
    unit = next((u for u in units if r.endswith(u)), None)
    try:
        value = float(r[: -len(unit)]) if unit else -1.0
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UserError(f"link rate {rate!r}: give it in tc's units, e.g. 100mbit or 10gbit")
    return value * units[unit]


def rate_for(cluster_rate: str, hosts: int, ranks_per_host: int, speedup: float = 1.0,
             cores: int | None = None) -> str:
    """The link rate (tc's units, whole kbit/s) at which an emulated run keeps a real cluster's ratio of compute to
    network: the cluster's links carry ``cluster_rate`` while each of its ranks computes ``speedup`` times as fast
    as one core here (1: a CPU core like these; a GPU: the ratio of its step time to a core's, e.g. from ``gnndist
    bench model`` on both). Here compute runs :func:`dilation` times slower than on a core of its own, so the links
    are shaped to ``cluster_rate / (dilation x speedup)``: 16 x 1 ranks on 2 cores standing for 800 Mbit/s links
    of one core per host is 100 Mbit/s; 4 hosts x 4 GPUs 40x a core each on 25 GbE, 78 Mbit/s."""
    if speedup <= 0:
        raise UserError(f"speed-up {speedup:g}: a rank of the cluster computes a positive multiple of a core here")
    bits = bits_per_second(cluster_rate) / (dilation(hosts, ranks_per_host, cores) * speedup)
    return f"{max(1, round(bits / 1e3))}kbit"


def host_cores(host: int, hosts: int, available: list[int] | None = None) -> list[int]:
    """The cores emulated host ``host`` of ``hosts`` may run on: an equal share of this machine's (``available``:
    this process's affinity), or, with more hosts than cores, one core shared with the other hosts on it.

    Without it every host would see all the machine's cores and its ranks would start that many threads each
    (:func:`gnndist.dist.join.split_threads`): 16 hosts x 2 threads on 2 cores, whose parallel regions wait on
    threads the other hosts hold (a 1.75 MB fold measured 290 ms against 22 ms with the cores shared out).
    """
    cpus = sorted(available if available is not None else os.sched_getaffinity(0))
    if hosts >= len(cpus):
        return [cpus[host % len(cpus)]]
    share = len(cpus) // hosts
    return cpus[host * share : (host + 1) * share]


def why_not() -> str | None:
    """Why this machine cannot emulate hosts (not root, no ``ip`` / ``tc``), or ``None`` when it can."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, veth links, tc)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return f"emulated hosts need {' and '.join(missing)} (iproute2)"
    return None


def _sh(*cmd: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise UserError(f"{' '.join(full)}: {(r.stderr or r.stdout).strip().splitlines()[-1:] or ['failed']}")
    return r


def _burst(rate: str) -> str:
    """A tbf bucket of about 10 ms of traffic at ``rate`` (at least 64 KiB: one large segment train)."""
    return f"{max(64 * 1024, int(bits_per_second(rate) / 8 / 100))}b"


@dataclass
class HostResult:
    """What one host's agent did: its exit code (``None``: killed at the timeout), output, and seconds."""

    host: int
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


class EmulatedCluster:
    """``hosts`` namespaces on a bridge, each link shaped to ``rate``; a context manager that tears all down.

    Args:
        hosts: emulated hosts (one torchrun agent each).
        ranks_per_host: ranks each agent starts (``--nproc-per-node``).
        rate: every link's rate in tc's units (``None``: unshaped).
        tag: names the namespaces ``gdc<tag>-*`` (default: this process's id, so two harnesses never collide).
        max_restarts: each agent's ``--max-restarts`` (torchrun's: the whole group restarts after a rank fails;
            ``gnndist train --checkpoint`` then resumes from the newest checkpoint).
    """

    def __init__(self, hosts: int, ranks_per_host: int = 1, rate: str | None = "100mbit", tag: str | None = None,
                 max_restarts: int = 0):
        if hosts < 1 or hosts > 250 or ranks_per_host < 1:
            raise UserError(f"--hosts {hosts} --ranks-per-host {ranks_per_host}: need 1-250 hosts and >= 1 rank each")
        self.hosts, self.ranks_per_host, self.rate, self.max_restarts = hosts, ranks_per_host, rate, max_restarts
        self.tag = tag or str(os.getpid())
        self.net = 77 + (int(self.tag) % 100 if self.tag.isdigit() else 0)  # 10.<net>.0.0/16
        self.switch = f"gdc{self.tag}-sw"
        self.names = [f"gdc{self.tag}-h{k}" for k in range(hosts)]
        self._made: list[str] = []
        self._etc: list[Path] = []  # /etc/netns/<namespace> folders made here
        self._procs: list[subprocess.Popen] = []
        self._logs: list[str] = []  # the agents' output files, removed once read or at close
        self._old_term = None

    def address(self, host: int) -> str:
        return f"10.{self.net}.{host // 250}.{host % 250 + 1}"

    # ------------------------------------------------------------------ set-up and tear-down
    def __enter__(self) -> EmulatedCluster:
        reason = why_not()
        if reason:
            raise UserError(reason)
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        _sh("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        _sh("ip", "link", "add", "br0", "type", "bridge", ns=self.switch)
        _sh("ip", "link", "set", "br0", "up", ns=self.switch)
        for k, ns in enumerate(self.names):
            _sh("ip", "netns", "add", ns)
            self._made.append(ns)
            port = f"p{k}"
            _sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
            _sh("ip", "link", "set", port, "master", "br0", ns=self.switch)
            _sh("ip", "link", "set", port, "up", ns=self.switch)
            _sh("ip", "addr", "add", f"{self.address(k)}/16", "dev", "eth0", ns=ns)
            _sh("ip", "link", "set", "eth0", "up", ns=ns)
            _sh("ip", "link", "set", "lo", "up", ns=ns)
            self._hosts_file(ns)
            if self.rate:
                shape = ["rate", self.rate, "burst", _burst(self.rate), "latency", "100ms"]
                _sh("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", *shape, ns=ns)  # the host's egress
                _sh("tc", "qdisc", "add", "dev", port, "root", "tbf", *shape, ns=self.switch)  # its ingress

    def _hosts_file(self, ns: str) -> None:
        """``/etc/netns/<ns>/hosts``: this machine's ``/etc/hosts`` and every emulated host's name and address."""
        folder = Path("/etc/netns") / ns
        folder.mkdir(parents=True, exist_ok=True)
        self._etc.append(folder)
        try:
            base = Path("/etc/hosts").read_text()
        except OSError:
            base = "127.0.0.1 localhost\n"
        # each address also as IPv6-mapped: the c10d store's dual-stack socket sees its clients that way
        names = "".join(f"{a} {name}\n::ffff:{a} {name}\n" for a, name in
                        [(self.address(k), name) for k, name in enumerate(self.names)] + [("127.0.0.1", "localhost")])
        (folder / "hosts").write_text(base.rstrip("\n") + "\n::1 localhost\n" + names)

    def close(self) -> None:
        """Kill every process of the run and in the namespaces, delete the namespaces and the agents' output files
        (idempotent)."""
        for p in self._procs:
            if p.poll() is None:
                _kill_group(p)
        for name in self._logs:
            Path(name).unlink(missing_ok=True)
        for ns in self._made:
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for ns in reversed(self._made):
            for _ in range(20):  # a namespace whose last process is still exiting is busy for a moment
                if _sh("ip", "netns", "delete", ns, check=False).returncode == 0 or ns not in leftovers(""):
                    break
                time.sleep(0.1)
        self._made.clear()
        for folder in self._etc:
            shutil.rmtree(folder, ignore_errors=True)
        self._etc.clear()
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    # ------------------------------------------------------------------ jobs
    def agent_command(self, host: int, args: list[str], rdzv_id: str) -> list[str]:
        """The command host ``host`` runs: one torchrun agent of ``gnndist <args>`` (or of the script ``args[1]``
        with its arguments when ``args[0]`` is ``"--script"``: a benchmark's own rank body)."""
        program = args[1:] if args[:1] == ["--script"] else ["-m", "gnndist.cli", *args]
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.hosts),
                "--nproc-per-node", str(self.ranks_per_host), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{self.address(0)}:{PORT}", "--rdzv-id", rdzv_id,
                "--rdzv-conf", f"is_host={int(host == 0)}",  # the namespaces share one hostname: say who serves
                "--max-restarts", str(self.max_restarts), "--local-addr", self.address(host), *program]

    def link(self, host: int, up: bool) -> None:
        """Cut host ``host``'s link (``up=False``: as a pulled cable, no packet in or out) or bring it back."""
        _sh("ip", "link", "set", f"p{host}", "up" if up else "down", ns=self.switch)

    def run(self, args: list[str], env: dict[str, str] | None = None, timeout: float = 900.0,
            on_timeout=None, at: list[tuple[float, object]] = ()) -> list[HostResult]:
        """Run ``gnndist <args>`` on every host at once (one torchrun agent each) and wait for all of them.

        ``timeout``: seconds after which every agent still running is killed (its ``returncode`` ``None``);
        ``on_timeout(cluster)`` is called first (e.g. to dump the ranks' stacks). ``at``: ``(seconds, action)``
        pairs, ``action(cluster)`` called that long after the start (e.g. ``lambda c: c.link(3, False)``).
        """
        pending = sorted(at, key=lambda a: a[0])
        rdzv = f"gdc{self.tag}-{time.monotonic_ns()}"
        base = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        base.pop("GLOO_SOCKET_IFNAME", None)  # the product chooses, as on a cluster whose users set nothing
        logs = []
        for k, ns in enumerate(self.names):
            out, err = _tempfile(f"host{k}.out"), _tempfile(f"host{k}.err")
            logs.append((out, err))
            self._logs += [out.name, err.name]
            cmd = ["ip", "netns", "exec", ns, *self.agent_command(k, args, rdzv)]
            mine = host_cores(k, self.hosts)
            self._procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=base, start_new_session=True,
                                                preexec_fn=lambda c=mine: os.sched_setaffinity(0, c)))
        procs = self._procs[-self.hosts:]
        t0 = time.monotonic()
        ended = [None] * self.hosts
        while time.monotonic() - t0 < timeout:
            while pending and time.monotonic() - t0 >= pending[0][0]:
                pending.pop(0)[1](self)
            for k, p in enumerate(procs):
                if ended[k] is None and p.poll() is not None:
                    ended[k] = time.monotonic() - t0
            if all(e is not None for e in ended):
                break
            time.sleep(0.2)
        if any(p.poll() is None for p in procs):
            if on_timeout is not None:
                on_timeout(self)
            for p in procs:
                if p.poll() is None:
                    _kill_group(p)
        results = []
        for k, (p, (out, err)) in enumerate(zip(procs, logs)):
            p.wait()
            rc = p.returncode if ended[k] is not None or p.returncode >= 0 else None
            results.append(HostResult(k, rc, _read(out), _read(err), ended[k] if ended[k] is not None else timeout))
        return results

    def rank_pids(self) -> dict[int, list[int]]:
        """Host -> process ids in its namespace (agents and ranks), for stack dumps."""
        return {k: [int(p) for p in _sh("ip", "netns", "pids", ns, check=False).stdout.split()]
                for k, ns in enumerate(self.names)}


def leftovers(tag: str = "") -> list[str]:
    """Network namespaces this harness made (``gdc<tag>*``) that still exist, and their ``/etc/netns`` folders:
    none after a clean exit."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    etc = Path("/etc/netns")
    folders = [str(f) for f in etc.glob(f"gdc{tag}*")] if etc.is_dir() else []
    return [n for n in names if n.startswith(f"gdc{tag}")] + folders


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tempfile(name: str):
    import tempfile

    f = tempfile.NamedTemporaryFile("w+", prefix="gdc-", suffix=f"-{name}", delete=False)
    return f


def _read(f) -> str:
    f.flush()
    f.seek(0)
    text = f.read()
    f.close()
    Path(f.name).unlink(missing_ok=True)
    return text
