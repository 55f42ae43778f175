"""Balance settings and their choice by modelled epoch time (``--balance auto``, the default).

A *setting* is what METIS balances and how tightly: constraints among ``nodes``, ``edges``
(degree), ``train`` (training flag), ``types`` (a typed graph: one constraint per node type, its
nodes), ``send`` and ``recv`` (halo rows) and ``time`` (a node's share of its rank's modelled layer
times; these three read off a first partition, see :func:`derived_weights`), each with a tolerance
(METIS ``ubvec``: the heaviest part may weigh ``tol`` times the mean; ``types:1.1`` gives every type
1.1). ``--balance`` takes one explicitly
(``nodes,edges:1.2``; a constraint without ``:tol`` gets METIS's 1.03) or ``auto``.

``auto`` partitions with each setting of :data:`AUTO_SETTINGS` (fewer on large graphs, see
:func:`auto_plan`; those within its time and memory budget, :func:`budget_plan`), refines each
(:mod:`gnndist.partition.refine`), and keeps the one of least halo volume unless another is
modelled faster by more than the cost model's error band (:func:`choose`; the modelled epoch time
is :func:`gnndist.cost.epoch_time` on the 1D halo exchange's per-rank loads, :func:`rank_loads`).
Everything is seeded, so the same graph and seed give the same choice.

The model: a GCN-like network of widths ``(F, hidden, classes)`` (the default model: 2
layers, hidden 16) on the ``ib`` network preset unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gnndist.partition.backends import kaminpar_preset
from gnndist.partition.book import GlobalCSR, each, exchange_pairs, row_chunks

from gnndist.cost import MODEL_ERROR, NETWORKS, Network, RankLoad
from gnndist.errors import UserError
from gnndist.machine import CHUNK

CONSTRAINTS = ("nodes", "edges", "train", "types", "send", "recv", "time")
DERIVED_CONSTRAINTS = ("send", "recv", "time")  # weights read off a first partition (derived_weights)
TIME_SCALE = 1000  # the mean node's modelled time, in METIS weight units
RECV_SCALE = 4  # the receive shares are fractions: METIS gets them x 4, rounded
METIS_TOLERANCE = 1.03  # METIS's default ubvec entry for k-way
DEFAULT_NETWORK = "ib"
# auto's plan by graph size (adjacency entries): every setting up to MEDIUM, two up to LARGE,
# then one METIS run with the edge-cut objective on a sampled graph (see auto_plan)
MEDIUM = 1 << 23
LARGE = 1 << 25
AUTO_BUDGET = 4.0  # auto's estimated seconds at most this many times its cheapest candidate's (--auto-budget)
AUTO_MIN_SECONDS = 5.0  # ... or this many estimated seconds, whichever is more: small graphs try every candidate
# auto's candidates' estimated partitioner memory at most this many times its leanest candidate's, or
# AUTO_MIN_BYTES, whichever is more (estimate_bytes): a graph of a few million entries tries every backend,
# a larger one only those near the leanest (METIS's 64-bit build needs ~6x KaMinPar's bytes)
AUTO_MEMORY = 2.0
AUTO_MIN_BYTES = 1 << 29  # 512 MiB, about the interpreter's own: under it a candidate at most doubles the process
METIS_MAX_ENTRIES = 3 << 24  # above this, METIS sees a uniformly sampled subgraph of about this size (~50M)


@dataclass(frozen=True)
class Setting:
    """One balance setting: constraint names and their tolerances (same length)."""

    constraints: tuple[str, ...]
    tolerances: tuple[float, ...]

    @property
    def structural(self) -> list[tuple[str, float]]:
        """The (constraint, tolerance) pairs METIS can weigh without a first partition (not
        :data:`DERIVED_CONSTRAINTS`)."""
        return [(c, t) for c, t in zip(self.constraints, self.tolerances) if c not in DERIVED_CONSTRAINTS]

    @property
    def base(self) -> Setting | None:
        """The setting of the first partition a setting with :data:`DERIVED_CONSTRAINTS` reads its weights off
        (its structural constraints, else :data:`PLAIN`); None for a setting without them."""
        own = self.structural
        if len(own) == len(self.constraints):
            return None
        return Setting(*zip(*own)) if own else PLAIN

    @property
    def label(self) -> str:
        """``--balance`` spelling of this setting, e.g. ``nodes:1.03,edges:1.2``."""
        return ",".join(f"{c}:{t:g}" for c, t in zip(self.constraints, self.tolerances))


PLAIN = Setting(("nodes",), (METIS_TOLERANCE,))
ALL3 = Setting(("nodes", "edges", "train"), (METIS_TOLERANCE,) * 3)  # the default before --balance auto
VOLUME = Setting(("nodes", "send", "recv"), (METIS_TOLERANCE, 1.10, 1.10))  # volume-balanced METIS
TIME = Setting(("time",), (METIS_TOLERANCE,))  # balances each node's modelled time (derived_weights)
AUTO_SETTINGS = (
    PLAIN,
    Setting(("nodes",), (1.10,)),
    Setting(("nodes", "edges"), (1.05, 1.20)),
    Setting(("nodes", "edges"), (METIS_TOLERANCE, METIS_TOLERANCE)),
    ALL3,
    VOLUME,
    TIME,
    Setting(("time",), (1.10,)),
)
# a typed graph's extra candidate: every node type balanced, with the labelled (target-type) nodes and the
# aggregation work; on synthetic-mag it holds every type within METIS's tolerance at less volume than
# nodes,edges,train (docs/heterogeneous.md, "Balance per node type")
TYPED = Setting(("types", "train", "edges"), (METIS_TOLERANCE,) * 3)


def parse_balance(spec) -> Setting | None:
    """``"auto"`` (or ``("auto",)``) -> None; ``"nodes,edges:1.2"`` or ``("nodes", "edges:1.2")`` -> a Setting.

    Raises :class:`UserError` naming ``--balance`` for an unknown constraint or a bad tolerance.
    """
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    items = [s for s in items if s]
    if items == ["auto"]:
        return None
    names, tols = [], []
    for item in items:
        name, _, tol = item.partition(":")
        if name == "auto":
            raise UserError("--balance auto cannot be combined with constraints; give auto alone")
        if name not in CONSTRAINTS:
            raise UserError(f"--balance: unknown constraint {name!r}; choose from {', '.join(CONSTRAINTS)} "
                            "(each optionally :TOLERANCE, e.g. edges:1.2), or auto")
        if name in names:
            raise UserError(f"--balance: {name} is given twice")
        try:
            value = float(tol) if tol else METIS_TOLERANCE
        except ValueError:
            value = float("nan")
        if not 1.0 < value < 100.0:
            raise UserError(f"--balance: the tolerance of {name} must be a number in (1, 100), got {tol!r}")
        names.append(name)
        tols.append(value)
    if names and all(c in ("send", "recv") for c in names):
        raise UserError("--balance: send and recv balance the volume of a first partition that balances "
                        "something else; add nodes (e.g. nodes,send:1.1,recv:1.1)")
    return Setting(tuple(names), tuple(tols))


def auto_plan(nnz: int, method: str = "metis", typed: bool = False) -> tuple[list[tuple[str, Setting]], str | None]:
    """The (backend, setting) pairs ``auto`` considers on a graph of ``nnz`` adjacency entries, and the METIS
    objective it forces; :func:`budget_plan` then keeps those that fit its time and memory budget.

    ``typed``: a heterogeneous graph; up to :data:`LARGE` METIS also tries :data:`TYPED` (every node type
    balanced), which only METIS can weigh.

    ``method`` is ``auto`` (every backend that fits) or one backend. Each try is one partitioner run.
    METIS with the ``vol`` objective takes ~6 min at 50M entries here, with ``cut`` ~1.5 min
    (benchmarks/README.md), so large graphs get fewer runs; above :data:`LARGE` ``auto`` hands the
    graph to KaMinPar alone (several times faster and leaner than METIS there), else one METIS ``cut``
    run on a sample. KaMinPar and Mt-KaHyPar balance one weight: they get the one-constraint settings.
    """
    from gnndist.partition.backends import BACKENDS

    if method == "random":
        return [], None
    single = [s for s in AUTO_SETTINGS if len(s.constraints) == 1]
    typed_metis = (TYPED,) if typed else ()
    if method != "auto":
        pool = AUTO_SETTINGS + typed_metis if method == "metis" else single
        if nnz <= MEDIUM:
            return [(method, s) for s in pool], None
        if nnz <= LARGE:
            pool = (PLAIN, AUTO_SETTINGS[2], *typed_metis) if method == "metis" else (PLAIN,)
            return [(method, s) for s in pool], None
        return [(method, PLAIN)], "cut" if method == "metis" else None
    if nnz > LARGE:
        if BACKENDS["kaminpar"].available() is None:
            return [("kaminpar", PLAIN)], None
        return [("metis", PLAIN)], "cut"
    plan, forced = auto_plan(nnz, "metis", typed)
    plan += [("kaminpar", PLAIN), ("hypergraph", PLAIN)]
    return plan, forced


# The order in which auto's budget admits candidates: time:1.03 first (it won 9 of the 18 cases of
# benchmarks/README.md's settings table), then plain METIS (its partition is time:1.03's first run already,
# so it costs one refinement more, and with it auto is never modelled slower than plain METIS by more than the
# model's error band, see choose), then the
# others by how often they won (nodes,edges,train 4, three of them degenerate; time:1.1 3; ...), KaMinPar
# early (the cheapest run, the best on Cora and Amazon Photo at 8 parts), the hypergraph last (the least
# volume, but 20-200x METIS's time and never the least modelled time in the backends table).
AUTO_PRIORITY = (("metis", TIME), ("metis", PLAIN), ("metis", TYPED), ("metis", ALL3), ("kaminpar", PLAIN),
                 ("metis", AUTO_SETTINGS[7]), ("metis", AUTO_SETTINGS[1]), ("metis", AUTO_SETTINGS[3]),
                 ("metis", VOLUME), ("metis", AUTO_SETTINGS[2]), ("hypergraph", PLAIN))


def estimate_seconds(backend: str, objective: str, nnz: int, n: int, parts: int) -> float:
    """Estimated seconds of one partitioner run on this kind of machine (one core of the 2-core box of
    ``benchmarks/README.md``), fitted to the backends table there (8 graphs of 10k-1.6M entries, P = 8, 32).

    A deterministic function of the graph's size and P, so the plan it leads to is the same every run.
    METIS ``vol``: ~(1 + 0.35 P) us per entry (2-31 measured); ``cut`` and KaMinPar: ~1.5 us per entry;
    Mt-KaHyPar's deterministic preset: ~2 s + (60 + 3 P) us per entry (17-218 measured).
    """
    if backend == "metis":
        return nnz * ((1.0 + 0.35 * parts) if objective == "vol" else 1.5) * 1e-6
    if backend == "kaminpar":
        return nnz * 1.5e-6
    if backend == "hypergraph":
        return 2.0 + (nnz + n) * (60.0 + 3.0 * parts) * 1e-6
    return 0.0


def refine_seconds(nnz: int, n: int, parts: int, passes: int, tries: int = 1024) -> float:
    """Estimated seconds of one refinement: ``passes`` volume passes at ~0.3 (1 + P / 8) us per entry each,
    then the peer pruning's tries (at most ``min(tries, 2 P (P - 1))``) at ~1 ms + 0.8 us per node each
    (fitted on the same 8 graphs, the plain METIS partition refined)."""
    if parts <= 1:
        return 0.0
    volume = passes * nnz * 0.3e-6 * (1.0 + parts / 8)
    return volume + min(tries, 2 * parts * (parts - 1)) * (1e-3 + 0.8e-6 * n)


def estimate_bytes(backend: str, nnz: int, metis_index_bytes: int = 8) -> float:
    """Estimated peak bytes one partitioner run adds to the process, beyond the CSR it is given (the refinement,
    the same for every candidate, aside). A deterministic function of the graph's size, measured here
    (``/proc/self/status`` VmHWM over VmRSS before the call, one thread):

    METIS: ~16 ``idx_t`` per entry (its copies of the graph, its coarser levels and their refinement data;
    pymetis's 64-bit build took 131 B per entry on a 20M-entry SBM at P = 4, with ``vol`` and ``cut``
    alike, and 45-57 B on Cornell5's 1.6M at P = 8); KaMinPar: by the preset and compression
    ``backends.kaminpar_preset`` picks for this size (:data:`KAMINPAR_BYTES`); Mt-KaHyPar: ~100 B per entry (85 B
    on Cornell5, with the nets handed over as Python lists).
    """
    if backend == "kaminpar":
        kp = kaminpar_preset(nnz)
        form = "terapart" if kp.preset == "terapart" else "compressed" if kp.compress else "default"
        return KAMINPAR_BYTES[form] * nnz
    per_entry = {"metis": 16.0 * metis_index_bytes, "hypergraph": 100.0}.get(backend, 0.0)
    return per_entry * nnz


# KaMinPar's peak per entry by preset / compression (docs/partitioning.md, its table from
# benchmarks/kaminpar_presets.py; 64-bit ids): default uncompressed 16.3-17.0 B (16.6 on an SBM and 17.5 on Cornell5
# before), compressed 11.7-13.2; terapart (always compressed) 10.5-10.7 at 19.9M-49.7M entries
KAMINPAR_BYTES = {"default": 17.5, "compressed": 13.0, "terapart": 11.0}


def budget_plan(plan: list[tuple[str, Setting]], objective: str, nnz: int, n: int, parts: int, refine_s: float,
                budget: float, metis_index_bytes: int = 8) -> tuple[list[tuple[str, Setting]], dict]:
    """The candidates of ``plan`` auto runs within its memory and time budget, and what it decided and why.

    Memory first: a candidate whose partitioner's estimated peak (:func:`estimate_bytes`) exceeds
    :data:`AUTO_MEMORY` times the leanest candidate's, and :data:`AUTO_MIN_BYTES`, is not run; the candidates
    run one after another, so auto's peak is then within that of the leanest backend's (about the chosen
    one's own), not METIS's several runs' on a graph KaMinPar holds in a sixth of the bytes.

    Then time: every remaining candidate's cost is its partitioner's estimated seconds
    (:func:`estimate_seconds`; a setting read off a first partition, ``time`` or ``send,recv``, adds that first
    run unless another candidate pays for it) plus one refinement (``refine_s``). The budget is ``budget`` times
    the cheapest candidate's cost, at least :data:`AUTO_MIN_SECONDS`; ``budget`` 0 means no budget at all
    (neither memory nor time). The cheapest candidate always runs; the others are admitted in
    :data:`AUTO_PRIORITY` order while the estimated total stays within the budget. The kept candidates run
    in ``plan`` order (ties go to the earlier, as before).

    Returns the kept plan and ``{"multiple", "seconds", "cheapest", "estimated_s", "memory", "skipped"}`` with
    one line per skipped candidate saying why (``memory``: ``{"multiple", "bytes", "leanest",
    "estimated_bytes"}``).
    """
    def cost(b: str, s: Setting, ran: set) -> float:
        """Refinement plus the partitioner runs not yet paid for (its own, its first partition's)."""
        runs = {(b, s)} | ({(b, s.base)} if s.base is not None else set())
        return refine_s + sum(estimate_seconds(r[0], objective, nnz, n, parts) for r in runs - ran)

    def admit(c: tuple[str, Setting]) -> None:
        kept.append(c)
        ran.update({c} | ({(c[0], c[1].base)} if c[1].base is not None else set()))

    label = lambda b, s: f"{b} {s.label}"  # noqa: E731
    alone = {label(b, s): cost(b, s, set()) for b, s in plan}
    info = {"multiple": budget, "estimated_s": {k: round(v, 3) for k, v in alone.items()}, "memory": None,
            "skipped": {}}
    if budget <= 0 or len(plan) <= 1:
        info.update(seconds=None, cheapest=None)
        return list(plan), info
    fits, info["memory"] = _within_memory(plan, nnz, metis_index_bytes, info["skipped"])
    cheapest = min(fits, key=lambda c: alone[label(*c)])
    limit = max(budget * alone[label(*cheapest)], AUTO_MIN_SECONDS)
    info.update(seconds=round(limit, 3), cheapest=label(*cheapest))
    order = sorted(fits, key=lambda c: AUTO_PRIORITY.index(c) if c in AUTO_PRIORITY else len(AUTO_PRIORITY))
    order.remove(cheapest)
    kept: list[tuple[str, Setting]] = []
    ran: set = set()
    total = alone[label(*cheapest)]
    admit(cheapest)
    for b, s in order:
        c = cost(b, s, ran)
        if total + c <= limit:
            admit((b, s))
            total += c
        else:
            info["skipped"][label(b, s)] = (
                f"estimated {c:.1f} s would take auto to {total + c:.1f} s, over its budget of {limit:.1f} s "
                f"({budget:g} x {label(*cheapest)}'s {alone[label(*cheapest)]:.1f} s; --auto-budget 0 tries all)")
    info["estimated_total_s"] = round(total, 3)
    return [c for c in plan if c in kept], info


def _within_memory(plan: list[tuple[str, Setting]], nnz: int, metis_index_bytes: int,
                   skipped: dict) -> tuple[list[tuple[str, Setting]], dict]:
    """The candidates of ``plan`` whose estimated partitioner peak is within auto's memory budget (the leanest
    always), the budget's account, and one line in ``skipped`` per candidate left out."""
    label = lambda b, s: f"{b} {s.label}"  # noqa: E731
    need = {label(b, s): estimate_bytes(b, nnz, metis_index_bytes) for b, s in plan}
    leanest = min(plan, key=lambda c: need[label(*c)])
    limit = max(AUTO_MEMORY * need[label(*leanest)], AUTO_MIN_BYTES)
    fits = [c for c in plan if need[label(*c)] <= limit]
    for b, s in plan:
        if need[label(b, s)] > limit:
            skipped[label(b, s)] = (
                f"estimated peak {need[label(b, s)] / 2**30:.2f} GiB, over auto's memory budget of "
                f"{limit / 2**30:.2f} GiB ({AUTO_MEMORY:g} x {label(*leanest)}'s {need[label(*leanest)] / 2**30:.2f} "
                f"GiB; --auto-budget 0 tries all)")
    account = {"multiple": AUTO_MEMORY, "bytes": int(limit), "leanest": label(*leanest),
               "estimated_bytes": {k: int(v) for k, v in need.items()}}
    return fits, account


def choose(records: list[dict], band: float = MODEL_ERROR) -> tuple[int, dict]:
    """The candidate ``auto`` keeps, and which rule decided: the least halo volume, unless another candidate is
    modelled faster than it by more than the cost model's error band.

    The model's order of two candidates is trusted only beyond its error on measured epochs
    (:data:`gnndist.cost.MODEL_ERROR`, the median over its validation grid): a candidate with more volume
    than the least-volume one (ties: the lesser modelled time, then the earlier) wins only when its
    modelled gain ``1 - t / t_least`` exceeds ``band``; then the fastest modelled one wins (ties: the
    earlier). Otherwise the least-volume one does: volume is what the partitioner measures exactly.

    Args:
        records: the candidates in plan order, each with ``comm_volume`` (rows), ``modelled_epoch_s`` and,
            for the report, ``method`` and ``balance``.
        band: the relative error within which modelled times are not told apart (default ``MODEL_ERROR``).

    Returns:
        The index kept and ``{"rule", "why", "band", "least_volume", "fastest", "gain"}``: ``rule`` is
        ``"least volume"`` or ``"modelled time"``, ``why`` one line for the report, ``least_volume`` and
        ``fastest`` the labels (``method balance``) of those candidates, ``gain`` the fastest one's.
    """
    if not records:
        raise ValueError("auto has no candidate to choose from")
    label = lambda r: f"{r.get('method', 'metis')} {r.get('balance', '')}".strip()  # noqa: E731
    times = [float(r["modelled_epoch_s"]) for r in records]
    least = min(range(len(records)), key=lambda i: (records[i]["comm_volume"], times[i], i))
    fastest = min(range(len(records)), key=lambda i: (times[i], i))
    gain = 1.0 - times[fastest] / times[least] if times[least] > 0 else 0.0
    info = {"band": band, "least_volume": label(records[least]), "fastest": label(records[fastest]), "gain": gain}
    if len(records) == 1:
        return 0, {**info, "rule": "least volume", "why": "the only candidate"}
    if fastest == least or times[fastest] >= times[least]:
        return least, {**info, "rule": "least volume", "why": "least volume, and the least modelled time"}
    if gain > band:
        return fastest, {**info, "rule": "modelled time", "why": (
            f"modelled time: {label(records[fastest])} {100 * gain:.1f} % faster than the least-volume candidate "
            f"({label(records[least])}), beyond the model's error band {100 * band:.0f} %")}
    return least, {**info, "rule": "least volume", "why": (
        f"least volume: the others' modelled gains were within the model's error band {100 * band:.0f} % (at most "
        f"{100 * gain:.1f} %, {label(records[fastest])})")}


def imbalance(values: np.ndarray) -> float:
    """The largest value over the mean (1.0 for none, or a zero mean)."""
    mean = values.mean() if len(values) else 0.0
    return float(values.max() / mean) if mean > 0 else 1.0


def network(name: str | Network | None) -> Network:
    """A cost-model preset by name (default ``ib``), or ``name`` itself when it is already a :class:`Network`
    (constants the caller measured, e.g. ``--partition-network probe``)."""
    if isinstance(name, Network):
        return name
    name = name or DEFAULT_NETWORK
    if name not in NETWORKS:
        raise UserError(f"unknown partition cost network {name!r}; choose from {', '.join(sorted(NETWORKS))}")
    return NETWORKS[name]


def rank_loads(csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1,
               chunk: int = CHUNK) -> list[RankLoad]:
    """Per-rank loads of the 1D halo exchange of a partition, straight from the assignment (no renumbering), counted
    ``chunk`` entries at a time on ``threads`` threads (:func:`~gnndist.partition.book.exchange_pairs`: the same
    loads at any chunk and count).

    Equal to :func:`gnndist.partition.layouts.grid_loads` with ``c = 1`` on the renumbered graph.
    """
    return loads_from_pairs(exchange_pairs(csr, assign, parts, chunk, threads)[0], csr, assign)


def loads_from_pairs(pair: np.ndarray, csr: GlobalCSR, assign: np.ndarray) -> list[RankLoad]:
    """The :class:`RankLoad` of every rank from the rows every pair of parts exchanges (``[src, dst]``)."""
    parts = len(pair)
    messages = np.maximum(np.count_nonzero(pair, axis=0), np.count_nonzero(pair, axis=1))
    nnz = np.bincount(assign, weights=csr.degree(), minlength=parts)
    owned = np.bincount(assign, minlength=parts)
    return [RankLoad(expand_send=int(pair[k].sum()), expand_recv=int(pair[:, k].sum()), messages=int(messages[k]),
                     nnz=int(nnz[k]), rows=int(owned[k])) for k in range(parts)]


def sampled_csr(csr: GlobalCSR, max_entries: int, seed: int) -> GlobalCSR:
    """A symmetric subgraph keeping each undirected edge with probability ``max_entries / nnz`` (seeded hash).

    METIS's memory grows with the entries it sees (~100 bytes each with pymetis's 64-bit
    build); the refinement then works on the full graph.
    """
    keep_p = max_entries / max(csr.nnz, 1)
    if keep_p >= 1.0:
        return csr
    rows = csr.rows()
    x = np.minimum(rows, csr.col).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= np.maximum(rows, csr.col).astype(np.uint64) + np.uint64(seed)  # the same for (u, v) and (v, u)
    x *= np.uint64(0xBF58476D1CE4E5B9)  # splitmix64's finaliser
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(29)
    keep = (x >> np.uint64(40)) < np.uint64(int(keep_p * (1 << 24)))
    del x
    rowptr = np.zeros(csr.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=csr.num_nodes), out=rowptr[1:])
    return GlobalCSR(rowptr, csr.col[keep])


def volume_weights(csr: GlobalCSR, assign: np.ndarray, parts: int, threads: int = 1,
                   chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """Per-node weights whose part sums are the 1D halo exchange's send and receive rows of ``assign``.

    ``send[v]``: the other parts ``v`` has a neighbour in (its row is sent to each), so a part's
    sum is exactly its send volume. ``recv[v]``: for each neighbour ``u`` of ``v`` in another
    part, ``1 / (neighbours u has in v's part)``, so a part's sum is exactly the rows it
    receives; x :data:`RECV_SCALE`, rounded. A second METIS run balancing these alongside the
    nodes spreads the halo traffic evenly over the ranks (the weights move with the nodes, so
    they hold approximately for the new partition: the volume-balancing of ``--balance
    nodes,send,recv``). Counted ``chunk`` entries at a time on ``threads`` threads (the same weights at any chunk
    and count: a node's shares are summed in its row's order either way).

    Shapes:
        assign ``[N]`` -> ``{"send": [N], "recv": [N]}`` int64
    """
    from gnndist.partition.counts import part_counts

    n = csr.num_nodes
    cnt = part_counts(csr, assign, parts, threads=threads, chunk=chunk)
    send = (cnt.nonzero_per_row() - (cnt.get(np.arange(n), assign) > 0)).astype(np.int64)
    share = np.empty(n)  # [N] float64

    def shares(span: tuple[int, int]) -> None:  # rows r0 .. r1: each chunk fills its own slice
        r0, r1 = span
        v = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(csr.rowptr[r0 : r1 + 1]))
        u = csr.col[csr.rowptr[r0] : csr.rowptr[r1]]
        cut = assign[v] != assign[u]
        v, u = v[cut], u[cut]
        share[r0:r1] = np.bincount(v - r0, weights=1.0 / cnt.get(u, assign[v]), minlength=r1 - r0)

    each(shares, row_chunks(csr.rowptr, chunk), threads)
    return {"send": send, "recv": np.rint(RECV_SCALE * share).astype(np.int64)}


def derived_weights(csr: GlobalCSR, assign: np.ndarray, parts: int, unit: np.ndarray, threads: int = 1,
                    chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """The weights of the constraints read off a first partition ``assign``: :func:`volume_weights`' ``send`` and
    ``recv``, and ``time``: a node's share of its rank's modelled layer times summed over the layers,
    ``per_row + per_nnz * degree + per_halo * (send + recv) / 2`` (``unit``: the per-row, per-nonzero and
    per-halo-row seconds of :func:`gnndist.partition.rank_times.unit_costs`, summed over layers), scaled so
    the mean node weighs :data:`TIME_SCALE`, at least 1. Balancing ``time`` balances the ranks' compute and
    halo time at once in one METIS constraint (fixed costs and peers aside). ``threads``, ``chunk``: as
    :func:`volume_weights` counts.

    Shapes:
        assign ``[N]`` -> ``{"send": [N], "recv": [N], "time": [N]}`` int64
    """
    out = volume_weights(csr, assign, parts, threads, chunk)
    per_row, per_nnz, per_halo = unit[0], unit[1], unit[2]
    t = per_row + per_nnz * csr.degree() + per_halo * 0.5 * (out["send"] + out["recv"] / RECV_SCALE)
    out["time"] = np.maximum(np.rint(t * TIME_SCALE / max(float(t.mean()), 1e-300)), 1).astype(np.int64)
    return out
