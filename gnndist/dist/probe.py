"""Measure the cost model's machine constants on the running ranks (``--network probe``, the default of ``auto``).

:func:`probe` times each constant in rounds until two rounds agree (:data:`TOLERANCE`);
:func:`probed` keeps the result per machine, torch version, device and world size in a JSON
file (default ``<data root>/probe.json``) and reuses it, unless ``--reprobe``. Every rank
gets rank 0's values.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from gnndist.cost import NETWORKS, Network, host_index
from gnndist.files import atomic_file
from gnndist.machine import data_root, host_identity

log = logging.getLogger("gnndist")

TOLERANCE = 0.15  # two consecutive rounds of the probe agree within 15 % on every constant
ROUNDS = 5  # at most this many rounds
SUSTAINED = 0.02  # seconds of back-to-back calls in one timing of local work


def default_cache() -> Path:
    """Where measured constants are kept: ``<data root>/probe.json`` (:func:`gnndist.machine.data_root`:
    ``$GNNDIST_DATA``, else ``~/.cache/gnndist``)."""
    return Path(data_root()) / "probe.json"


def cache_key(hosts: Sequence[str], device: torch.device | str) -> str:
    """What a probe's result holds for: the hosts of the job's ranks (``hosts[k]``: rank ``k``'s, as
    :func:`~gnndist.dist.grid.host_identity` names it: hostname and addresses, so the network between them),
    the ranks on each, the torch version, the device type and the world size.

    One host: ``vm/192.0.2.2|torch 2.13.0|cpu|P=4``; several: ``16 hosts x 1 (vm/10.77.0.1, ...; 3f2a91c0)|...``
    with a digest of every host's identity and rank count.
    """
    count = Counter(hosts)
    if len(count) == 1:
        where = hosts[0]
    else:
        per = sorted(set(count.values()))
        digest = hashlib.sha256(json.dumps(sorted(count.items())).encode()).hexdigest()[:8]
        where = f"{len(count)} hosts x {'/'.join(map(str, per))} ({min(count)}, ...; {digest})"
    kind = torch.device(device).type
    form = f"|probe {_PROBE_FORM[kind]}" if kind in _PROBE_FORM else ""
    form += f"|links {_HOSTS_FORM}" if len(count) > 1 else ""
    return f"{where}|torch {torch.__version__}|{kind}{form}|P={len(hosts)}"


def machine_key(world_size: int, device: torch.device | str) -> str:
    """:func:`cache_key` of a job of ``world_size`` ranks on this machine alone (a partition's or a benchmark's
    lookup of what a ``--strategy auto`` run here measured)."""
    return cache_key([host_identity()] * world_size, device)


def read_cached(path: Path, key: str) -> Network | None:
    """The constants stored under ``key`` in ``path``, or ``None`` (no file, no entry, or an unreadable one)."""
    return (_read_entry(path, key) or (None, None))[0]


def _read_entry(path: Path, key: str) -> tuple[Network, float | None] | None:
    """``(constants, check seconds or None)`` stored under ``key`` (see :func:`probed`), or ``None``."""
    try:
        entry = json.loads(Path(path).read_text())[key]
        check = entry.get("check_s")
        return Network.from_values("probe", entry), (float(check) if check is not None else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _store(path: Path, key: str, entry: dict) -> None:
    """``entry`` under ``key`` in the JSON table ``path``, dated; other keys kept.

    Called by one process of a job (rank 0). Atomic on a home directory many hosts share: written to a
    temporary file named by host, process and a random part, then renamed over the table, so a reader sees
    the old table or the new one; the table is re-read just before, so another job's entries are kept (two
    jobs writing at the same moment: the later one's table wins). A table that cannot be written is a
    warning, not a failure: the next run measures again.
    """
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    table[key] = {**entry, "date": datetime.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__}
    try:
        with atomic_file(path) as f:
            f.write(json.dumps(table, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        log.warning(f"could not keep the cost model's measurements in {path} ({e.strerror or e}); "
                    f"the next run measures them again")


def write_cached(path: Path, key: str, net: Network, spread: float, check_s: float | None = None) -> None:
    """Store ``net`` under ``key`` in ``path``, with the date, the torch version, the probe's spread and the
    seconds of its check exchange (:func:`probed`)."""
    extra = {"check_s": check_s} if check_s is not None else {}
    _store(path, key, {**{k: v for k, v in asdict(net).items() if k != "name"}, "spread": spread, **extra})


def read_decision(path: Path | None, key: str | None) -> dict | None:
    """``auto``'s timed decision stored under ``key`` (``{"keep": name, "measured": {name: seconds}}``), or ``None``."""
    try:
        entry = json.loads(Path(path).read_text())[key]
        return {"keep": str(entry["keep"]), "measured": {str(k): float(v) for k, v in entry["measured"].items()}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_decision(path: Path, key: str, keep: str, measured: dict[str, float]) -> None:
    """Store ``auto``'s timed decision under ``key``: the layout kept and the seconds each near candidate took."""
    _store(path, key, {"keep": keep, "measured": measured})


def probed(grid, cache: Path | None, reprobe: bool = False, csr=None, kernel=None, say=None) -> Network:
    """The probe's constants for this machine and world size: from ``cache`` when it holds them
    (and not ``reprobe``), else measured (:func:`probe`, collective) and stored there by rank 0.

    The key names the hosts and their addresses, not the network's state: a link shaped anew between the same
    hosts keeps its key. So with several ranks the probe also times one check exchange (an all-to-all of
    256 KiB per peer) and stores its seconds; a stored entry is reused only while the same exchange, timed
    again, takes between 1 / :data:`CHECK_RATIO` and :data:`CHECK_RATIO` times that (else measured again, said
    in one line). Rank 0 alone reads the file and its values go to every rank
    (:meth:`~gnndist.dist.grid.ProcessGrid.share`): hosts sharing a home directory may see it at different
    moments, so no other rank's reading of it steers anything. ``cache`` ``None``: measure, store nothing.
    ``say``: called with one line on rank 0.
    """
    key = cache_key(grid.hosts, grid.device)
    found = grid.share(_read_entry(cache, key) if cache is not None and not reprobe and grid.is_main else None)
    if found is not None and grid.num_hosts > 1 and not found[0].beta_host:
        found = None  # measured before the probe told the hosts' links apart: measure again
    if found is not None and found[1] is not None and grid.world_size > 1:
        now = check_time(grid)  # collective: every rank took the same branch (the shared entry)
        if not found[1] / CHECK_RATIO <= now <= found[1] * CHECK_RATIO:
            if say and grid.is_main:
                say(f"cost model: the stored probe of {key} no longer holds (its check exchange took "
                    f"{1e3 * now:.2f} ms, {1e3 * found[1]:.2f} ms when probed): measuring again")
            found = None
    if found is not None:
        if say and grid.is_main:
            say(f"cost model: probe constants of {key} reused from {cache} (--reprobe measures them again)")
        return found[0]
    net, spread = probe(grid, csr, kernel=kernel)
    check = check_time(grid) if grid.world_size > 1 else None
    if cache is not None and grid.is_main:
        write_cached(cache, key, net, spread, check)
    if say and grid.is_main:
        say(f"cost model: probed {key}: rounds agree within {100 * spread:.1f} %"
            + (f"; stored in {cache}" if cache is not None else ""))
    return net


def probe(grid, csr=None, repeats: int = 11, kernel=None, rounds: int = ROUNDS,
          tolerance: float = TOLERANCE) -> tuple[Network, float]:
    """Measure the cost model's constants on the running machine; every rank gets the same values.

    overhead and alpha: all-to-alls of one element per peer on the world and on a 2-rank axis;
    beta: one of 256 KiB per peer (on several hosts, per peer on the rank's own host; and ``beta_host``:
    one to every rank of the other hosts, over the bytes the busiest host's link carries, from 256 KiB per peer
    grown until it lasts :data:`_FAR_SECONDS` (:func:`far_per_peer`); ``alpha_host``: one of one element per peer
    on the other hosts);
    gamma_sparse: this rank's SpMM (``csr``, width 32, with the run's ``kernel`` settings); gamma_dense:
    a ``[2048, 256] @ [256, 64]`` product (the skinny shape of a layer's ``X @ W``; on a GPU
    ``[65536, 512] @ [512, 128]``, :func:`probe_shapes`); gamma_elem: a multiply of 2^20 elements (on a
    GPU 2^26); step_overhead:
    forward, backward and an Adam step of a 2-layer model on 8 rows (the fixed cost of a step).
    Each timing is the median over ``repeats`` (local work: each about :data:`SUSTAINED` seconds
    of back-to-back calls), the slowest rank's (all-reduce of the maximum). Rounds of these
    timings repeat until two consecutive rounds agree within ``tolerance`` on every timing (at
    most ``rounds``); the constants come from the median of every round's timings.

    Returns:
        the constants and the relative spread of the last two rounds' timings (the largest).
    """
    one_round = _round(grid, csr, kernel, repeats)
    taken = [one_round()]
    spread = float("inf")
    for _ in range(rounds - 1):
        taken.append(one_round())
        prev, cur = taken[-2:]
        spread = float(np.max(np.abs(cur - prev) / np.maximum(np.maximum(cur, prev), 1e-300)))
        if spread <= tolerance:  # the same decision on every rank: the timings are all-reduced
            break
    t = np.median(np.stack(taken), axis=0)
    return _constants(t, grid.world_size, host_index(grid.hosts), grid.device), spread


def _big_splits(host: np.ndarray, rank: int) -> tuple[list[int], list[int]] | None:
    """Elements per peer of the big all-to-alls on several hosts, ``(near, far)``: :data:`_BIG_PER_PEER` to every
    other rank of this rank's host / of the other hosts, none to the rest; ``None`` on one host."""
    if len(set(host.tolist())) < 2:
        return None
    same = host == host[rank]
    near = [_BIG_PER_PEER if s and k != rank else 0 for k, s in enumerate(same)]
    return near, [0 if s else _BIG_PER_PEER for s in same]


# a round's timings, in this order (seconds): tiny all-to-all on the world, on a 2-rank axis (0 when there is
# none), big all-to-all (on several hosts: to the peers of the rank's own host only, 0 when it has none), SpMM at
# width 32 (per nonzero and column), X @ W, elementwise multiply, tiny training step, and on several hosts the big
# all-to-all to the peers of the other hosts only and a tiny one (one element each) to them (else 0, 0)
_BIG_PER_PEER = 1 << 16  # elements per peer of the big all-to-all (256 KiB)
# on several hosts the exchange across them starts there and grows until it lasts _FAR_SECONDS: what a link's
# buffers pass at once (a switch's, a NIC's ring, tc's shaping bucket of 10 ms of traffic) reaches a short
# exchange faster than the link's rate, which a layer's exchange of megabytes does not see (4 emulated hosts at
# 1 Gbit/s: 256 KiB per peer measured 354 MB/s on a 125 MB/s link)
_FAR_SECONDS = 0.05
_FAR_MAX_ELEMS = 1 << 24  # the busiest rank's elements of that exchange at most (64 MiB)
# X @ W and the elementwise multiply per device type: on a GPU the CPU's shapes take a few microseconds, the launch
# and not the work (an H200 timed 2.4 TFLOP/s and 80 G elements/s on them: ~5x and ~4x short of what a layer's
# products reach there, issue 50), so a GPU times shapes of a big layer's size, as skinny (N = 128)
_DENSE = {"cpu": (2048, 256, 64), "cuda": (1 << 16, 512, 128)}
_ELEM = {"cpu": 1 << 20, "cuda": 1 << 26}
# bumped when what the probe measures changes, so a stored result of the old probe is measured again
_PROBE_FORM = {"cuda": 2}
_HOSTS_FORM = 2  # on several hosts: 2 = the exchange across hosts sized by _FAR_SECONDS


def probe_shapes(device: torch.device | str) -> tuple[tuple[int, int, int], int]:
    """``((rows, F_in, F_out), elements)``: the dense product and the elementwise multiply the probe times on
    ``device``'s type (a CPU's for any other)."""
    kind = torch.device(device).type
    return _DENSE.get(kind, _DENSE["cpu"]), _ELEM.get(kind, _ELEM["cpu"])


# a stored probe is reused while its check exchange takes within this factor of the stored time
CHECK_RATIO = 2.0


def check_time(grid, repeats: int = 5) -> float:
    """Seconds of the probe's check exchange on every rank (collective; the slowest rank's median): an
    all-to-all of :data:`_BIG_PER_PEER` elements to every peer."""
    n = _BIG_PER_PEER * grid.world_size
    inp, out = torch.zeros(n, device=grid.device), torch.empty(n, device=grid.device)
    t = _timer(grid, repeats)(lambda: grid.all_to_all_single(out, inp))
    vals = torch.tensor([t], dtype=torch.float64, device=grid.device)
    grid.all_reduce_(vals, op="max")
    return float(vals.item())


def _round(grid, csr, kernel, repeats: int):
    """A function taking one round of the probe's timings on every rank (collective), the slowest rank's."""
    from gnndist.kernels import spmm

    dev, P = grid.device, grid.world_size
    median_time = _timer(grid, repeats)
    small, small_out = torch.zeros(P, device=dev), torch.empty(P, device=dev)
    splits = _big_splits(host_index(grid.hosts), grid.rank)

    def big_exchange(sizes: list[int] | None):
        """A timed all-to-all of :data:`_BIG_PER_PEER` elements to each peer ``sizes`` names (every peer: None)."""
        n = sum(sizes) if sizes is not None else _BIG_PER_PEER * P
        inp, out = torch.zeros(n, device=dev), torch.empty(n, device=dev)  # the peers send what they receive
        return lambda: median_time(lambda: grid.all_to_all_single(out, inp, sizes, sizes))

    big = big_exchange(splits[0] if splits else None)
    far_peer = far_per_peer(grid, splits[1]) if splits else _BIG_PER_PEER
    far = big_exchange([far_peer if v else 0 for v in splits[1]]) if splits else None
    if splits:  # one element to each rank of the other hosts: their messages' cost
        far_sizes = [int(v > 0) for v in splits[1]]
        tiny_in, tiny_out = torch.zeros(sum(far_sizes), device=dev), torch.empty(sum(far_sizes), device=dev)
    near_any = splits is not None and grid.all_reduce_(torch.tensor([float(any(splits[0]))], device=dev),
                                                       op="max").item() > 0
    pair = grid.axes(2)["row"] if P > 2 and P % 2 == 0 else None
    x = torch.randn(csr.num_cols, 32, device=dev) if csr is not None and csr.nnz else None
    k = {"impl": kernel.impl, "tune": kernel.tune} if kernel is not None else {}
    dense, elems = probe_shapes(dev)
    a, w = torch.randn(*dense[:2], device=dev), torch.randn(*dense[1:], device=dev)
    e1, e2 = torch.randn(elems, device=dev), torch.randn(elems, device=dev)
    step = _tiny_step(dev)

    def one_round() -> np.ndarray:
        t = [median_time(lambda: grid.all_to_all_single(small_out, small)),
             median_time(lambda: grid.all_to_all_single(small_out[:2], small[:2], axis=pair)) if pair else 0.0,
             big() if splits is None or near_any else 0.0,
             # seconds per nonzero and column, this rank's own: the all-reduce below then gives every rank the
             # slowest rank's rate (the slowest time over each rank's own nonzeros differs per rank, issue 51)
             median_time(lambda: spmm(csr, x, **k), True) / (csr.nnz * 32) if x is not None else 0.0,
             median_time(lambda: a @ w, True), median_time(lambda: torch.mul(e1, e2), True), median_time(step, True),
             far() if far is not None else 0.0,
             median_time(lambda: grid.all_to_all_single(tiny_out, tiny_in, far_sizes, far_sizes)) if splits else 0.0,
             float(far_peer)]
        vals = torch.tensor(t, dtype=torch.float64, device=dev)
        grid.all_reduce_(vals, op="max")  # the slowest rank's; identical on every rank from here
        return vals.cpu().numpy()

    return one_round


def far_per_peer(grid, far: list[int]) -> int:
    """Elements per peer of the probe's exchange across hosts (collective; the same on every rank): from
    :data:`_BIG_PER_PEER`, grown (x2 to x16, toward the target) while the slowest rank's exchange lasts under
    :data:`_FAR_SECONDS` and the busiest rank sends at most :data:`_FAR_MAX_ELEMS`.

    Args:
        far: per rank, nonzero where that rank is on another host (:func:`_big_splits`'s second list).
    """
    peers = torch.tensor([float(sum(1 for v in far if v))], dtype=torch.float64, device=grid.device)
    grid.all_reduce_(peers, op="max")
    cap = max(_BIG_PER_PEER, _FAR_MAX_ELEMS // max(int(peers.item()), 1))
    timer = _timer(grid, 3)
    per = _BIG_PER_PEER
    while per < cap:
        sizes = [per if v else 0 for v in far]
        inp = torch.zeros(sum(sizes), device=grid.device)
        out = torch.empty_like(inp)
        t = torch.tensor([timer(lambda: grid.all_to_all_single(out, inp, sizes, sizes))], dtype=torch.float64,
                         device=grid.device)
        grid.all_reduce_(t, op="max")  # the slowest rank's: every rank grows alike
        if t.item() >= _FAR_SECONDS:
            break
        per = min(cap, per * min(16, max(2, math.ceil(_FAR_SECONDS / max(t.item(), 1e-6)))))
    return per


def _timer(grid, repeats: int):
    """``median_time(fn, local=False)``: the median seconds of ``repeats`` timed calls of ``fn`` after a warm-up;
    ``local`` (no collective inside): each timing runs it back to back for about :data:`SUSTAINED` seconds, so a
    loaded machine's preemptions weigh as they do in a step."""

    def median_time(fn, local: bool = False) -> float:
        t0 = time.perf_counter()
        fn()  # warm-up
        grid.synchronize()
        warm = time.perf_counter() - t0
        inner = min(int(SUSTAINED / max(warm, 1e-9)) + 1, 64) if local else 1
        ts = []
        for _ in range(repeats):
            grid.barrier()
            grid.synchronize()
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            grid.synchronize()
            ts.append((time.perf_counter() - t0) / inner)
        return float(np.median(ts))

    return median_time


def _constants(t: np.ndarray, P: int, host: np.ndarray | None = None, device: torch.device | str = "cpu") -> Network:
    """The constants of a round's timings ``t`` (see :func:`_round`) at ``P`` ranks on the hosts ``host`` (``[P]``,
    :func:`gnndist.cost.host_index`; None: one host)."""
    t_world, t_pair, t_big, spmm_rate, t_dense, t_elem, t_step, t_far, t_far_tiny, *rest = (float(v) for v in t)
    far_peer = (rest[0] if rest else _BIG_PER_PEER) * 4  # bytes per peer of the exchange across hosts
    if P > 2 and t_pair:  # the 2-rank axis gives the second point: overhead + alpha
        alpha = max(t_world - t_pair, 0.0) / (P - 2)
        overhead = max(t_pair - alpha, 0.0)
    else:
        alpha, overhead = t_world / max(P - 1, 1), 0.0
    peer = _BIG_PER_PEER * 4  # bytes per peer of a big all-to-all
    beta_host = alpha_host = 0.0
    if host is not None and len(set(host.tolist())) > 1:
        size = np.bincount(host, minlength=P)[host]  # [P] ranks on each rank's host
        if t_far_tiny:  # the slowest rank's: the one with the most peers elsewhere, at most
            alpha_host = max(t_far_tiny - overhead, 0.0) / float(np.max(P - size))
        beta_host = float(np.max(size * (P - size))) * far_peer / max(t_far - t_world, 1e-9)  # the busiest link
        big_bytes = float(np.max(size - 1)) * peer  # to every other rank of the largest host
        if not t_big:  # one rank per host: nothing within a host; a rank's rate is its host's
            t_big, big_bytes = t_far, (P - 1) * far_peer
    else:
        big_bytes = peer * (P - 1)
    inv_beta = max(t_big - t_world, 1e-9) / big_bytes if P > 1 else 0.0
    gamma_s = spmm_rate if spmm_rate else NETWORKS["ethernet"].gamma_sparse
    (m, kk, n), elems = probe_shapes(device)
    return Network("probe", alpha, 1.0 / inv_beta if inv_beta > 0 else float("inf"), gamma_s,
                   t_dense / (2 * m * kk * n), overhead, t_elem / elems, t_step, beta_host, alpha_host)


def _tiny_step(dev: torch.device):
    """Forward, backward and an Adam step of a 2-layer model on 8 rows: what a step costs beyond its layers' work."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 8, device=dev), torch.randint(0, 4, (8,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def with_overrides(net: Network, alpha: float | None = None, beta: float | None = None) -> Network:
    """``net`` with ``--alpha`` / ``--beta`` replacing its values where given."""
    return replace(net, **{k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None})


__all__ = ["CHECK_RATIO", "ROUNDS", "TOLERANCE", "cache_key", "check_time", "default_cache", "machine_key", "probe",
           "probe_shapes", "probed", "read_cached", "read_decision", "with_overrides", "write_cached",
           "write_decision"]
