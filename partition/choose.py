"""Which backend and balance setting make the parts: each candidate partitioned, refined and weighed, one kept.

The pipeline's assign stage (:func:`gnndist.partition.pipeline.assign`) runs these steps and names each
run on its progress bar:

    plan = candidates(req, csr, columns)          # the (backend, setting) pairs to run, within the budget
    for b, s in plan.candidates:
        for key in runs_of(b, s):                  # a first partition before a setting read off it; each once
            runs[key] = partitioned(req, csr, plan, columns, *key, runs)
        tried.append(refined(req, csr, plan, columns, b, s, runs[b, s]))
    made = chosen(req, plan, tried, train, seconds)   # the one kept (balance.choose) and how it was chosen
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gnndist.partition import balance
from gnndist.partition.backends import BACKENDS, Request, backend
from gnndist.partition.balance import PLAIN, Setting, choose, derived_weights, imbalance, rank_loads, sampled_csr
from gnndist.partition.book import GlobalCSR
from gnndist.partition.hetero import node_types_of
from gnndist.partition.metis import metis_index_bytes
from gnndist.partition.plan import auto_plan, budget_plan, refine_seconds
from gnndist.partition.rank_times import unit_costs
from gnndist.partition.refine import MAX_PASSES, RefineSettings, refine

from gnndist.cost import Network, epoch_time
from gnndist.errors import UserError


@dataclass(frozen=True)
class PartitionRequest:
    """What :func:`~gnndist.partition.partition` was asked for, checked; every stage reads it, none writes it."""

    data: object  # torch_geometric.data.Data, original ids
    parts: int
    method: str  # "auto" or a backend of BACKENDS
    objective: str  # METIS's (auto may force cut on a large graph: Assigned.objective)
    seed: int
    setting: Setting | None  # None: --balance auto
    refine: bool
    net: Network
    widths: tuple[int, ...]
    threads: int
    chunk: int
    budget: float
    schema: object | None = None  # a typed graph's HeteroSchema (data.hetero), else None


@dataclass(frozen=True)
class Plan:
    """The candidates to run and what was decided before any ran (the report's ``skipped``, ``auto.budget``)."""

    candidates: list[tuple[str, Setting]]  # in plan order (ties go to the earlier)
    objective: str
    metis_graph: GlobalCSR  # the graph METIS partitions: the whole one, or a sample of a large one
    sampled_entries: int | None  # the sample's adjacency entries, None when METIS sees the whole graph
    skipped: dict[str, str]  # backend -> why it cannot take this input
    budget: dict  # budget_plan's account
    refine: bool  # refine the candidates (--refine and more than one part)
    passes: int  # the refinement's volume passes


@dataclass(frozen=True)
class Tried:
    """One candidate run: its (refined) assignment, the refinement's statistics and its record for ``choose``."""

    backend: str
    setting: Setting
    assign: np.ndarray  # [N]
    refine: dict | None
    record: dict


@dataclass(frozen=True)
class Assigned:
    """The assign stage's product: every node's part, who made it, and the report's account of the choice."""

    assign: np.ndarray  # [N] part of every node (original ids)
    backend: str
    setting: Setting | None
    objective: str
    train: np.ndarray  # [N] 1 for a training node (a balance column, and the report's train imbalance)
    seconds: float
    fields: dict = field(default_factory=dict)  # the report's fields of the choice (sample, refine, skipped, auto)


def balance_columns(req: PartitionRequest, csr: GlobalCSR, train: np.ndarray) -> dict[str, np.ndarray]:
    """The structural balance weights by name: ``nodes``, ``edges`` (degree), ``train``, and on a typed
    graph ``types`` (``[N, T]``: a node weighs 1 in its type's column)."""
    n = csr.num_nodes
    columns = {"nodes": np.ones(n, dtype=np.int64), "edges": csr.degree(), "train": train}
    if req.schema is not None:
        types = node_types_of(np.arange(n), req.schema.offsets)
        columns["types"] = (types[:, None] == np.arange(len(req.schema.node_types))[None, :]).astype(np.int64)
    return columns


def candidates(req: PartitionRequest, csr: GlobalCSR, columns: dict) -> Plan:
    """The (backend, setting) pairs to run: ``--method auto`` every backend
    :func:`~gnndist.partition.plan.auto_plan` finds fitting (a backend that cannot take the input is
    skipped, with the reason), a named backend only itself (failing in one line when it cannot); of
    several, those beyond the memory or time budget are skipped (:func:`~gnndist.partition.plan.budget_plan`)."""
    plan, objective = _settings(req, csr, typed="types" in columns)
    usable, skipped = _usable(req, csr, plan, columns, objective)
    metis_graph, sampled = csr, None
    if csr.nnz > balance.METIS_MAX_ENTRIES and req.setting is None and any(b == "metis" for b, _ in usable):
        metis_graph = sampled_csr(csr, balance.METIS_MAX_ENTRIES, req.seed)
        sampled = int(metis_graph.nnz)
    can_refine = req.refine and req.parts > 1
    passes = int(np.clip((1 << 27) // max(csr.nnz, 1), 2, MAX_PASSES))
    refine_s = refine_seconds(csr.nnz, csr.num_nodes, req.parts, passes) if can_refine else 0.0
    index_bytes = metis_index_bytes(metis_graph.nnz) if any(b == "metis" for b, _ in usable) else 8
    usable, planned = budget_plan(usable, objective, metis_graph.nnz, csr.num_nodes, req.parts, refine_s, req.budget,
                                  index_bytes)
    return Plan(usable, objective, metis_graph, sampled, skipped, planned, can_refine, passes)


def _settings(req: PartitionRequest, csr: GlobalCSR, typed: bool) -> tuple[list[tuple[str, Setting]], str]:
    """Every (backend, setting) pair to consider and the METIS objective: a given ``--balance`` with every
    backend (auto) or the named one; else auto's plan, which may force ``cut``."""
    if req.setting is None:
        plan, forced = auto_plan(csr.nnz, req.method, typed=typed)
        return plan, forced or req.objective
    names = list(BACKENDS) if req.method == "auto" else [req.method]
    return [(b, req.setting) for b in names if b != "random"], req.objective


def _usable(req: PartitionRequest, csr: GlobalCSR, plan: list, columns: dict,
            objective: str) -> tuple[list[tuple[str, Setting]], dict[str, str]]:
    """The pairs whose backend can take this input, and why the others cannot (one reason per backend);
    a named backend that cannot fails in one line, and so does a plan left empty."""
    usable, skipped = [], {}
    for b, s in plan:
        request = Request(req.parts, _stand_in_weights(s, columns), None, req.seed, objective, req.threads)
        why = backend(b).unsupported(csr, request)
        if why is None:
            usable.append((b, s))
        elif req.method != "auto":
            raise UserError(why)
        else:
            skipped.setdefault(b, why)
    if not usable:
        raise UserError("no partitioner can take this input: " + "; ".join(skipped.values()))
    return usable, skipped


def runs_of(b: str, s: Setting) -> list[tuple[str, Setting]]:
    """The partitioner runs candidate ``(b, s)`` needs, in order: the first partition a setting with derived
    constraints (send, recv, time) reads its weights off, then its own."""
    return [(b, s.base), (b, s)] if s.base is not None else [(b, s)]


def partitioned(req: PartitionRequest, csr: GlobalCSR, plan: Plan, columns: dict, b: str, s: Setting,
                runs: dict) -> np.ndarray:
    """Backend ``b``'s assignment ``[N]`` under setting ``s``; a derived constraint's weights are read off
    the earlier run ``runs[b, s.base]`` (:func:`~gnndist.partition.balance.derived_weights`); a constraint whose
    column is all zero (no halo) is left out."""
    cols = dict(columns)
    if s.base is not None:
        unit = unit_costs(req.widths, req.net).sum(0)
        cols.update(derived_weights(csr, runs[b, s.base], req.parts, unit, req.threads, req.chunk))
    used = [(c, t) for c, t in zip(s.constraints, s.tolerances) if cols[c].any()]
    weights, tol = _table(used, cols) if used else (None, None)
    graph = plan.metis_graph if b == "metis" else csr
    return backend(b).assign(graph, Request(req.parts, weights, tol, req.seed, plan.objective, req.threads))


def refined(req: PartitionRequest, csr: GlobalCSR, plan: Plan, columns: dict, b: str, s: Setting,
            assign: np.ndarray) -> Tried:
    """Candidate ``(b, s)`` after the refinement, which keeps the structural constraints (it balances volume
    and time itself) or, with none, the node balance the partitioner gave; and its record for ``choose``."""
    settings = RefineSettings(req.widths, req.net, passes=plan.passes, threads=req.threads)
    raw_time = epoch_time(rank_loads(csr, assign, req.parts, req.threads, req.chunk), req.widths, req.net)
    stats = None
    if plan.refine and s.constraints:
        weights, tol = _table(s.structural or [("nodes", 1.0)], columns)
        assign, stats = refine(csr, assign, req.parts, weights, tol, settings)
    loads = rank_loads(csr, assign, req.parts, req.threads, req.chunk)
    send = np.array([ld.expand_send for ld in loads], dtype=float)
    record = {"method": b, "balance": s.label, "partitioner_modelled_epoch_s": raw_time,
              "modelled_epoch_s": settings.epoch(loads), "comm_volume": int(send.sum()),
              "max_send_over_mean": imbalance(send),
              "edge_imbalance": imbalance(np.array([ld.nnz for ld in loads], dtype=float))}
    return Tried(b, s, assign, stats, record)


def chosen(req: PartitionRequest, plan: Plan, tried: list[Tried], train: np.ndarray, seconds: float) -> Assigned:
    """The candidate :func:`~gnndist.partition.balance.choose` keeps (the least volume unless another is
    modelled faster beyond the model's error band), with the report's account of the choice."""
    best, decided = choose([t.record for t in tried])
    kept = tried[best]
    fields = {"metis_sampled_entries": plan.sampled_entries, "refine": kept.refine, "skipped": plan.skipped or None}
    fields = {k: v for k, v in fields.items() if v is not None}
    if req.setting is None or req.method == "auto":
        plain = next((t.record["partitioner_modelled_epoch_s"] for t in tried
                      if t.setting == PLAIN and t.backend == "metis"), None)
        fields["auto"] = {"chosen": kept.setting.label, "chosen_method": kept.backend, "objective": plan.objective,
                          "plain_metis_modelled_epoch_s": plain, "candidates": [t.record for t in tried],
                          "decided_by": decided, "budget": plan.budget}
    return Assigned(kept.assign, kept.backend, kept.setting, plan.objective, train, seconds, fields)


def _table(pairs: list[tuple[str, float]], columns: dict) -> tuple[np.ndarray, np.ndarray]:
    """The ``[N, ncon]`` weights and ``[ncon]`` tolerances of (constraint, tolerance) pairs: one column per
    constraint, ``types`` one per node type (each with its tolerance)."""
    weights = np.column_stack([columns[c] for c, _ in pairs])
    tol = np.concatenate([np.full(columns[c].shape[1] if columns[c].ndim == 2 else 1, t) for c, t in pairs])
    return weights, tol


def _stand_in_weights(s: Setting, columns: dict) -> np.ndarray | None:
    """A stand-in ``[N, ncon]`` weight table with one column per constraint of ``s`` (for the capability check)."""
    n = len(columns["nodes"])
    ncon = sum(columns[c].shape[1] if c in columns and columns[c].ndim == 2 else 1 for c in s.constraints)
    return np.ones((n, ncon), dtype=np.int64) if ncon > 1 else None
