"""``--balance auto``'s plan: the (backend, setting) candidates it runs, by graph size and within its budget.

:func:`auto_plan` gives the candidates a graph of its size gets (fewer on large graphs); :func:`budget_plan` keeps
those whose estimated partitioner seconds (:func:`estimate_seconds`, plus one refinement: :func:`refine_seconds`)
and peak bytes (:func:`estimate_bytes`) fit auto's budget. Every estimate is a deterministic function of the
graph's size and P, so the same graph gets the same plan on any machine. The settings themselves and the choice
among the partitions made are :mod:`gnndist.partition.balance`'s.
"""

from __future__ import annotations

from gnndist.partition.backends import kaminpar_preset
from gnndist.partition.balance import ALL3, AUTO_SETTINGS, PLAIN, TIME, TYPED, VOLUME, Setting

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
# model's error band, see balance.choose), then the
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
