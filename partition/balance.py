"""Balance settings and their choice by modelled epoch time (``--balance auto``, the default).

A *setting* is what METIS balances and how tightly: constraints among ``nodes``, ``edges``
(degree), ``train`` (training flag), ``types`` (a typed graph: one constraint per node type, its
nodes), ``send`` and ``recv`` (halo rows) and ``time`` (a node's share of its rank's modelled layer
times; these three read off a first partition, see :func:`derived_weights`), each with a tolerance
(METIS ``ubvec``: the heaviest part may weigh ``tol`` times the mean; ``types:1.1`` gives every type
1.1). ``--balance`` takes one explicitly
(``nodes,edges:1.2``; a constraint without ``:tol`` gets METIS's 1.03) or ``auto``.

``auto`` partitions with each setting of :data:`AUTO_SETTINGS` (fewer on large graphs, and those within its
time and memory budget: its plan, :mod:`gnndist.partition.plan`), refines each
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
