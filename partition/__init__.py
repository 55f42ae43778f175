"""METIS partitioning, renumbering, halo plans and the on-disk partition format.

    part = partition(data, parts=4)             # METIS(vol), balance chosen by modelled epoch time, refined
    part.save("out/cora-4", dataset="cora")     # DIR/META.json + DIR/part-K/*.npy
    arrays, meta = load("out/cora-4", rank=1)   # one rank reads only its own part
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from gnndist.partition.backends import BACKENDS, Request, backend, resolve_threads
from gnndist.partition.balance import (
    AUTO_BUDGET,
    HIDDEN,
    METIS_MAX_ENTRIES,
    PLAIN,
    Setting,
    auto_plan,
    budget_plan,
    choose,
    derived_weights,
    loads_from_pairs,
    model_widths,
    network,
    parse_balance,
    rank_loads,
    refine_seconds,
    sampled_csr,
)
from gnndist.partition.book import (
    CHUNK,
    GlobalCSR,
    LocalPart,
    PartitionBook,
    build_local_parts,
    check_parts,
    comm_volume,
    csr_from_edge_index,
    edge_values_in_csr,
    exchange_pairs,
    renumbered_csr,
    symmetric_csr,
)
from gnndist.partition.format import FORMAT_VERSION, read_meta, read_part, write_partition
from gnndist.partition.hetero import RelationSlicer, format_hetero, hetero_report, node_types_of
from gnndist.partition.layouts import layout_loads, replications
from gnndist.partition.metis import OBJECTIVES, metis_assign, metis_library, random_assign
from gnndist.partition.progress import Stages, rss_peak, stages_of
from gnndist.partition.rank_times import unit_costs
from gnndist.partition.refine import RefineSettings
from gnndist.partition.refine import refine as refine_assign

from gnndist.cost import Network, epoch_time
from gnndist.errors import UserError

METHODS = ("auto", *BACKENDS)
BALANCE = ("nodes", "edges", "train")

__all__ = [
    "BALANCE", "FORMAT_VERSION", "GlobalCSR", "LocalPart", "METHODS", "Partition", "PartitionBook",
    "build_local_parts", "comm_volume", "csr_from_edge_index", "format_report", "load", "metis_assign",
    "model_widths_of", "partition", "random_assign", "rank_loads", "read_meta", "read_part", "replications",
]


def _imbalance(values: np.ndarray) -> float:
    mean = values.mean() if len(values) else 0.0
    return float(values.max() / mean) if mean > 0 else 1.0


@dataclass
class Partition:
    """A partitioned graph held on one machine, ready to be saved for the ranks."""

    data: object  # torch_geometric.data.Data, original ids
    book: PartitionBook
    csr: GlobalCSR  # renumbered (new ids)
    method: str
    objective: str
    seed: int
    report: dict
    threads: int = 1  # threads of the save's chunked passes (the pipeline's --threads)

    def local_parts(self):
        """Yield each rank's :class:`LocalPart` in rank order."""
        return build_local_parts(self.csr, self.book, self.threads)

    def part_arrays(self):
        """Yield each rank's arrays as saved on disk: graph, plans, features, labels, masks."""
        d = self.data
        ea = getattr(d, "edge_attr", None)  # [E, *] -> [nnz, *] in CSR order; each part takes its rows' slice
        ei = getattr(d, "edge_attr_index", None)  # the edge list edge_attr is aligned with (default: edge_index)
        ea = edge_values_in_csr(self.csr, self.book, d.edge_index if ei is None else ei, ea.numpy()) \
            if ea is not None else None
        schema = getattr(d, "hetero", None)  # a typed graph: each part's CSR per relation (partition.hetero)
        relations = RelationSlicer(schema, self.book) if schema is not None else None
        for lp in self.local_parts():
            owned = lp.orig_id[: lp.n_owned]
            arrays = {
                "rowptr": lp.rowptr, "col": lp.col, "halo_gid": lp.halo_gid,
                "recv_counts": lp.recv_counts, "send_idx": lp.send_idx, "send_counts": lp.send_counts,
                "orig_id": lp.orig_id, "degree": lp.degree,
                "x": d.x[owned].numpy(), "y": d.y[owned].numpy(),
            }
            for m in ("train_mask", "val_mask", "test_mask"):
                mask = getattr(d, m, None)
                arrays[m] = (mask[owned] if mask is not None else torch.zeros(len(owned), dtype=torch.bool)).numpy()
            for m in ("train_masks", "val_masks", "test_masks"):  # every split the dataset holds, [n_owned, K]
                if getattr(d, m, None) is not None:
                    arrays[m] = getattr(d, m)[owned].numpy()
            if ea is not None:  # [nnz_local, *]: one row per local edge, in the local CSR's order
                lo, hi = self.book.offsets[lp.rank], self.book.offsets[lp.rank + 1]
                arrays["edge_attr"] = ea[self.csr.rowptr[lo] : self.csr.rowptr[hi]]
            if relations is not None:
                arrays.update(relations.arrays(lp.rank, lp.halo_gid))
            yield arrays
            if getattr(d, "memmaps", ()):  # imported here: a rank loading its part never imports the datasets
                from gnndist.datasets.npy_folder import drop_pages

                drop_pages(d.memmaps)  # the rows gathered from memory-mapped inputs: not resident

    def save(self, out: str | Path, dataset: str, progress: bool = True) -> Path:
        """Write the partition atomically to ``out`` (see :mod:`gnndist.partition.format`)."""
        d = self.data
        y = d.y
        meta = {
            "dataset": dataset, "parts": self.book.parts, "method": self.method,
            "objective": self.objective, "seed": self.seed,
            "N": int(self.csr.num_nodes), "E": int(self.csr.nnz), "F": int(d.x.shape[1]),
            "classes": int(getattr(d, "num_classes", None) or (int(y.max()) + 1 if y.numel() else 0)),
            "multilabel": bool(y.dim() > 1),
            "num_train": int(d.train_mask.sum()) if getattr(d, "train_mask", None) is not None else 0,
            "splits": int(d.train_masks.shape[1]) if getattr(d, "train_masks", None) is not None else 0,
            "split_kind": getattr(d, "split_kind", None),
            "offsets": self.book.offsets.tolist(),
            "report": self.report,
        }
        if getattr(d, "hetero", None) is not None:
            meta["hetero"] = d.hetero.to_meta()
        st = Stages(1, "save", progress)
        st.set_postfix_str("layout loads")
        # per-rank loads (rows, messages, nonzeros) of every SpMM layout this P admits: auto reads them
        meta["layouts"] = layout_loads(self.csr, self.book.offsets, threads=self.threads)
        st.close()
        parts = stages_of(self.part_arrays(), self.book.parts, "write part", progress)
        return write_partition(out, meta, parts, need_bytes=self.disk_bytes())

    def disk_bytes(self) -> int:
        """What the saved parts take, from their shapes (within a few %: the halo's ids and the .npy headers aside)."""
        d, n, nnz = self.data, int(self.csr.num_nodes), int(self.csr.nnz)
        ea = getattr(d, "edge_attr", None)
        per_node = (d.x[:1].numel() * d.x.element_size() + d.y[:1].numel() * d.y.element_size() + 3
                    + 8 + 8 + 4)  # x, y, masks, orig_id, degree, rowptr (int32 below 2^31 local entries)
        if getattr(d, "train_masks", None) is not None:  # train / val / test masks of every stored split
            per_node += 3 * d.train_masks.shape[1]
        per_entry = self.csr.col.dtype.itemsize + (ea[:1].numel() * ea.element_size() if ea is not None else 0)
        return n * per_node + nnz * per_entry


def model_widths_of(data, hidden: int = HIDDEN, layers: int = 2) -> tuple[int, ...]:
    """Widths ``(F, hidden, ..., hidden, classes)`` of a ``layers``-layer model on ``data`` (the cost model's).

    Args:
        data: a ``Data`` with ``x`` [N, F] and ``y`` [N] (classes: ``num_classes``, else ``max + 1``)
            or [N, T] (``T`` binary tasks).
        hidden: hidden width (default 16, the default model's).
        layers: number of layers, ``>= 1`` (default 2).
    """
    y = data.y
    classes = int(y.shape[1]) if y.dim() > 1 else int(getattr(data, "num_classes", None)
                                                       or (int(y.max()) + 1 if y.numel() else 1))
    return model_widths(int(data.x.shape[1]), classes, hidden, layers)


def partition(
    data,
    parts: int,
    method: str = "auto",
    objective: str = "vol",
    seed: int = 0,
    balance: str | tuple[str, ...] = "auto",
    progress: bool = True,
    refine: bool = True,
    cost_network: str | Network | None = None,
    widths: tuple[int, ...] | None = None,
    threads: int = 0,
    chunk: int = CHUNK,
    auto_budget: float = AUTO_BUDGET,
) -> Partition:
    """Partition ``data`` into ``parts`` parts and compute the quality report.

    Args:
        data: ``torch_geometric.data.Data`` with ``x``, ``y``, ``edge_index`` and masks.
            Self-loops and duplicate edges are dropped; the graph is symmetrised.
        parts: number of parts (= ranks), ``1 <= parts <= N``.
        method: ``"auto"`` (default: every backend that fits the graph, the least-volume result kept unless
            another is modelled faster beyond the model's error band), or one backend of
            :data:`~gnndist.partition.backends.BACKENDS`: ``"metis"``, ``"kaminpar"``, ``"hypergraph"``
            (Mt-KaHyPar, the halo volume itself) or ``"random"`` (the baseline).
        objective: METIS objective, ``"vol"`` (communication volume, default) or ``"cut"``.
        seed: seed of the partitioner: the same seed gives the same parts.
        balance: ``"auto"`` (default: the setting chosen by :func:`~gnndist.partition.balance.choose`, see
            :mod:`gnndist.partition.balance`), or balance constraints among ``nodes``,
            ``edges``, ``train``, ... each optionally ``name:tolerance`` (``"nodes,edges:1.2"``).
        progress: show a progress bar on a terminal (one line per stage when piped).
        refine: run the volume-balanced refinement after the partitioner (:mod:`gnndist.partition.refine`).
        cost_network: cost-model preset of the modelled epoch time (``ib`` by default), or the constants
            themselves (a :class:`~gnndist.cost.Network`, e.g. this machine's probe).
        widths: modelled layer widths (default ``(F, 16, classes)``, the default 2-layer GCN; another
            model's: :func:`model_widths_of`).
        threads: partitioner threads (KaMinPar, Mt-KaHyPar); 0 (default): every core of this process. Above 1
            KaMinPar's parts may vary run to run: the report's ``deterministic`` says whether these parts repeat.
        chunk: adjacency entries (edges) each chunked step handles at once; any value gives the same parts.
        auto_budget: when several candidates are considered (``method="auto"`` or ``balance="auto"``), their
            estimated seconds at most this many times the cheapest one's (at least a few seconds); the
            candidates skipped and why are in the report (:func:`~gnndist.partition.balance.budget_plan`).
            0: no budget, every candidate runs.
    """
    if method not in METHODS:
        raise UserError(f"--method must be one of {list(METHODS)}, got {method!r}")
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    check_budget(auto_budget)
    check_parts(int(data.num_nodes), parts)
    setting = parse_balance(balance)
    if setting is not None and "types" in setting.constraints and getattr(data, "hetero", None) is None:
        raise UserError("--balance types balances every node type of a heterogeneous graph; this graph has one node "
                        "type (balance nodes)")
    job = Job(data, parts, method, objective, seed, setting, refine, network(cost_network),
              widths or model_widths_of(data), resolve_threads(threads), chunk, auto_budget)
    job.bar = bar = Stages(len(STAGES), f"partition into {parts}", progress)
    for name, stage in STAGES:
        bar.set_postfix_str(method if name == "assign" else name)
        t0 = time.perf_counter()
        stage(job)
        job.stages.append({"stage": name, "seconds": round(time.perf_counter() - t0, 3), "peak_bytes": rss_peak()})
        bar.update()
    bar.close()
    job.report["stages"] = job.stages
    if getattr(data, "hetero", None) is not None:
        job.report["hetero"] = hetero_report(data.hetero, job.book, job.csr)
    return Partition(data, job.book, job.csr, method, job.objective, seed, job.report, job.threads)


@dataclass
class Job:
    """One run of the partition pipeline: the request, then what each stage of :data:`STAGES` leaves for the next."""

    data: object  # torch_geometric.data.Data, original ids
    parts: int
    method: str
    objective: str  # METIS's; the assign stage may force cut (auto on a large graph)
    seed: int
    setting: Setting | None  # None: --balance auto
    refine: bool
    net: Network
    widths: tuple[int, ...]
    threads: int
    chunk: int
    budget: float
    csr: GlobalCSR | None = None  # symmetrise: original ids; renumber: new ids
    assign: np.ndarray | None = None  # [N] part of every node (original ids)
    chosen: str = ""  # the backend that made ``assign``
    train: np.ndarray | None = None  # [N] 1 for a training node (a balance column and the report's imbalance)
    seconds_assign: float = 0.0
    book: PartitionBook | None = None
    loads: list | None = None  # [P] RankLoad of the 1D halo exchange
    cut: int = 0
    extra: dict = field(default_factory=dict)  # the report's fields of the assign stage
    bar: Stages | None = None  # the pipeline's progress (the assign stage names each candidate it runs)
    report: dict = field(default_factory=dict)
    stages: list = field(default_factory=list)  # [{stage, seconds, peak_bytes}] in order


def _symmetrise(job: Job) -> None:
    """The graph as one symmetric CSR without self-loops or duplicates, built in chunks on every thread (original ids)."""
    job.csr = symmetric_csr(job.data.edge_index, int(job.data.num_nodes), job.chunk, job.threads)


def _assign(job: Job) -> None:
    """Every node's part: the baseline, or each candidate (backend, balance setting) run and refined, one kept."""
    t0 = time.perf_counter()
    job.extra = {"cost_model": {"network": job.net.name, "widths": list(job.widths)}}
    n = job.csr.num_nodes
    train = getattr(job.data, "train_mask", None)
    job.train = train.numpy().astype(np.int64) if train is not None else np.zeros(n, dtype=np.int64)
    if job.method == "random":
        job.chosen, job.assign = "random", random_assign(n, job.parts, job.seed)
    else:
        columns = {"nodes": np.ones(n, dtype=np.int64), "edges": job.csr.degree(), "train": job.train}
        schema = getattr(job.data, "hetero", None)
        if schema is not None:  # [N, T]: a node weighs 1 in its type's column
            types = node_types_of(np.arange(n), schema.offsets)
            columns["types"] = (types[:, None] == np.arange(len(schema.node_types))[None, :]).astype(np.int64)
        job.assign, job.chosen, job.setting, job.objective = _choose(job, columns)
    job.seconds_assign = time.perf_counter() - t0


def _plans(job: Job) -> None:
    """Who owns what (the book), and every rank's 1D halo exchange: rows sent and received, peers."""
    job.book = PartitionBook(job.parts, job.assign)
    pair, job.cut = exchange_pairs(job.csr, job.assign, job.parts, job.chunk, job.threads)
    job.loads = loads_from_pairs(pair, job.csr, job.assign)


def _renumber(job: Job) -> None:
    """The CSR in new ids: part k owns one contiguous range (the original-id CSR is dropped)."""
    job.report = _quality(job)  # read off the original ids before they go
    job.csr = renumbered_csr(job.csr, job.book, job.chunk, job.threads)


def _quality(job: Job) -> dict:
    """The report: volume and balance against the random baseline, modelled epoch, who chose and how."""
    csr, parts, loads, assign = job.csr, job.parts, job.loads, job.assign
    n = csr.num_nodes
    n_halo = np.array([ld.expand_recv for ld in loads])  # [P] halo rows = rows received
    sent = np.array([ld.expand_send for ld in loads])
    vol = int(n_halo.sum())
    random_vol = vol if job.method == "random" else comm_volume(csr, random_assign(n, parts, job.seed), parts)
    n_owned = np.diff(job.book.offsets)
    nnz = np.array([ld.nnz for ld in loads])
    balanced = job.chosen != "random"
    setting = job.setting
    return {
        "parts": parts, "method": job.method, "backend": job.chosen, "library": backend(job.chosen).library(csr.nnz),
        "objective": job.objective if job.chosen == "metis" else (backend(job.chosen).objective if balanced else None),
        "seed": job.seed, "balance": list(setting.constraints) if balanced else [],
        "tolerances": dict(zip(setting.constraints, setting.tolerances)) if balanced else {},
        "num_nodes": n, "num_edges": int(csr.nnz // 2),
        "edge_cut": job.cut,
        "comm_volume": int(vol),
        "random_comm_volume": int(random_vol),
        "vs_random": float(vol / random_vol) if random_vol else 1.0,
        "max_send_volume": int(sent.max()),
        "max_recv_volume": int(n_halo.max()),
        "max_send_over_mean": _imbalance(sent.astype(float)),
        "max_recv_over_mean": _imbalance(n_halo.astype(float)),
        "modelled_epoch_s": epoch_time(loads, job.widths, job.net),
        "halo_fraction": [float(h / o) if o else 0.0 for h, o in zip(n_halo, n_owned)],
        "nodes_per_part": n_owned.tolist(),
        "peers_per_part": [ld.messages for ld in loads],  # ranks each exchanges halo rows with
        "imbalance": {
            "nodes": _imbalance(n_owned.astype(float)),
            "edges": _imbalance(nnz.astype(float)),
            "train": _imbalance(np.bincount(assign, weights=job.train, minlength=parts)),
        },
        "assign_seconds": round(job.seconds_assign, 3),
        **_determinism(job.chosen, job.threads),
        "metis_lib": metis_library(csr.nnz) if job.chosen == "metis" else None,
        **job.extra,
    }


# The pipeline, in order: each stage reads what the ones before left on the Job (its time and the process's
# peak memory after it go into the report's "stages")
STAGES = (("symmetrise", _symmetrise), ("assign", _assign), ("plans", _plans), ("renumber", _renumber))


def _choose(job: Job, columns: dict) -> tuple[np.ndarray, str, Setting, str]:
    """Run the partitioner (and the refinement) for each candidate (backend, setting) and keep one
    (:func:`~gnndist.partition.balance.choose`: the least volume unless another is modelled faster beyond the band).

    ``method`` ``auto`` tries every backend :func:`~gnndist.partition.balance.auto_plan` finds fitting
    (a backend whose package is missing is skipped, with the reason in the report); a named backend
    tries only itself, and fails in one line when it cannot take the input. Of several candidates, those
    beyond the time ``budget`` are skipped (:func:`~gnndist.partition.balance.budget_plan`).
    Returns the assignment, its backend and setting and the METIS objective; the report's fields go to ``job.extra``.
    """
    csr, parts, method, seed, setting, threads = job.csr, job.parts, job.method, job.seed, job.setting, job.threads
    widths, net, extra = job.widths, job.net, job.extra
    explicit = setting is not None
    skipped: dict[str, str] = {}
    if explicit:
        names = list(BACKENDS) if method == "auto" else [method]
        names = [b for b in names if b != "random"]
        plan = [(b, setting) for b in names]
        forced = None
    else:
        plan, forced = auto_plan(csr.nnz, method, typed="types" in columns)
    objective = forced or job.objective
    usable = []
    for b, s in plan:
        why = backend(b).unsupported(csr, Request(parts, _weights_of(s, columns), None, seed, objective, threads))
        if why is None:
            usable.append((b, s))
        elif method != "auto":
            raise UserError(why)
        else:
            skipped.setdefault(b, why)
    if not usable:
        raise UserError("no partitioner can take this input: " + "; ".join(skipped.values()))
    part_graph = csr
    if csr.nnz > METIS_MAX_ENTRIES and not explicit and any(b == "metis" for b, _ in usable):
        part_graph = sampled_csr(csr, METIS_MAX_ENTRIES, seed)
        extra["metis_sampled_entries"] = int(part_graph.nnz)
    can_refine = job.refine and parts > 1
    passes = int(np.clip((1 << 27) // max(csr.nnz, 1), 2, 16))
    refine_s = refine_seconds(csr.nnz, csr.num_nodes, parts, passes) if can_refine else 0.0
    usable, planned = budget_plan(usable, objective, part_graph.nnz, csr.num_nodes, parts, refine_s, job.budget)
    time_of = lambda loads: epoch_time(loads, widths, net)  # noqa: E731
    tried = []
    runs: dict[tuple[str, Setting], np.ndarray] = {}  # each backend's assignment per setting (a derived one starts from one)

    def run(b: str, s: Setting) -> np.ndarray:
        if (b, s) not in runs:
            own = s.structural
            cols = dict(columns)
            if len(own) < len(s.constraints):  # send / recv / time: read off a partition balancing the rest
                base = Setting(*zip(*own)) if own else PLAIN
                cols.update(derived_weights(csr, run(b, base), parts, unit_costs(widths, net).sum(0)))
            used = [(c, t) for c, t in zip(s.constraints, s.tolerances) if cols[c].any()]  # no halo: nothing to balance
            job.bar.set_postfix_str(f"{b} {s.label}")
            weights, tol = _table(used, cols) if used else (None, None)
            graph = part_graph if b == "metis" else csr
            runs[b, s] = backend(b).assign(graph, Request(parts, weights, tol, seed, objective, threads))
        return runs[b, s]

    for b, s in usable:
        assign = run(b, s)
        raw_time = time_of(rank_loads(csr, assign, parts))
        stats = None
        # refinement keeps the structural constraints (it balances volume and time itself); with none,
        # it keeps the node balance the partitioner gave (no part above the mean may grow)
        kept = s.structural or [("nodes", 1.0)]
        if can_refine and s.constraints:
            job.bar.set_postfix_str(f"refine {b} {s.label}")
            weights, tol = _table(kept, columns)
            assign, stats = refine_assign(csr, assign, parts, weights, tol,
                                          RefineSettings(widths, net, passes=passes, threads=threads))
        loads = rank_loads(csr, assign, parts)
        send = np.array([ld.expand_send for ld in loads], dtype=float)
        tried.append({"method": b, "setting": s, "assign": assign, "refine": stats, "record": {
            "method": b, "balance": s.label, "partitioner_modelled_epoch_s": raw_time,
            "modelled_epoch_s": time_of(loads), "comm_volume": int(send.sum()), "max_send_over_mean": _imbalance(send),
            "edge_imbalance": _imbalance(np.array([ld.nnz for ld in loads], dtype=float))}})
    best, decided = choose([t["record"] for t in tried])
    chosen = tried[best]
    if chosen["refine"] is not None:
        extra["refine"] = chosen["refine"]
    if skipped:
        extra["skipped"] = skipped
    if not explicit or method == "auto":
        plain = next((t["record"]["partitioner_modelled_epoch_s"] for t in tried
                      if t["setting"] == PLAIN and t["method"] == "metis"), None)
        extra["auto"] = {"chosen": chosen["setting"].label, "chosen_method": chosen["method"], "objective": objective,
                         "plain_metis_modelled_epoch_s": plain, "candidates": [t["record"] for t in tried],
                         "decided_by": decided, "budget": planned}
    return chosen["assign"], chosen["method"], chosen["setting"], objective


def _determinism(chosen: str, threads: int) -> dict:
    """The report's ``threads`` (of the backend that made the parts), ``deterministic`` and why."""
    b = backend(chosen)
    repeat, why = b.determinism(b.threads_used(threads))
    return {"threads": b.threads_used(threads), "threads_given": threads, "deterministic": repeat, "determinism": why}


def check_budget(budget: float) -> None:
    """``--auto-budget``: 0 (no budget) or a multiple >= 1; a one-line :class:`UserError` otherwise."""
    if not (budget == 0 or 1 <= budget < float("inf")):
        raise UserError(f"--auto-budget must be 0 (no budget) or a number >= 1, got {budget!r}")


def _table(pairs: list[tuple[str, float]], columns: dict) -> tuple[np.ndarray, np.ndarray]:
    """The ``[N, ncon]`` weights and ``[ncon]`` tolerances of (constraint, tolerance) pairs: one column per
    constraint, ``types`` one per node type (each with its tolerance)."""
    weights = np.column_stack([columns[c] for c, _ in pairs])
    tol = np.concatenate([np.full(columns[c].shape[1] if columns[c].ndim == 2 else 1, t) for c, t in pairs])
    return weights, tol


def _weights_of(s: Setting, columns: dict) -> np.ndarray | None:
    """A stand-in ``[N, ncon]`` weight table with one column per constraint of ``s`` (for the capability check)."""
    n = len(columns["nodes"])
    ncon = sum(columns[c].shape[1] if c in columns and columns[c].ndim == 2 else 1 for c in s.constraints)
    return np.ones((n, ncon), dtype=np.int64) if ncon > 1 else None


def load(root: str | Path, rank: int) -> tuple[dict[str, np.ndarray], dict]:
    """Read part ``rank`` of a saved partition (checksums verified) and its metadata."""
    meta = read_meta(root)
    return read_part(root, rank, meta), meta


def format_report(r: dict) -> str:
    """Human-readable multi-line partition report."""
    hf = r["halo_fraction"]
    imb = r["imbalance"]
    obj = f", objective {r['objective']}" if r.get("objective") else ""
    chosen = r.get("backend")
    how = f" -> {chosen} ({r['library']})" if chosen and chosen != "random" else ""
    lines = [
        f"partition: {r['parts']} parts, method {r['method']}{how}{obj}, seed {r['seed']}",
        f"  graph            {r['num_nodes']:,} nodes, {r['num_edges']:,} undirected edges",
        f"  edge cut         {r['edge_cut']:,} ({r['edge_cut'] / max(r['num_edges'], 1):.1%} of edges)",
        f"  comm volume      {r['comm_volume']:,} rows"
        f" (random: {r['random_comm_volume']:,}, ratio {r['vs_random']:.3f})",
        f"  max send / recv  {r['max_send_volume']:,} / {r['max_recv_volume']:,} rows per part",
        f"  halo fraction    max {max(hf):.3f}, mean {sum(hf) / len(hf):.3f} (halo rows / owned rows)",
        f"  imbalance        nodes {imb['nodes']:.3f}, edges {imb['edges']:.3f}, train {imb['train']:.3f} (max/mean)",
    ]
    if "max_send_over_mean" in r:  # reports written before --balance auto lack these
        lines.insert(5, f"  max send / mean  {r['max_send_over_mean']:.3f} (recv {r['max_recv_over_mean']:.3f})")
        cm = r["cost_model"]
        lines.append(f"  modelled epoch   {r['modelled_epoch_s'] * 1e3:.4g} ms (network {cm['network']}, "
                     f"GCN widths {'-'.join(map(str, cm['widths']))})")
    if r.get("stages"):  # reports written before the named stages lack them
        lines.append("  stages           " + ", ".join(f"{st['stage']} {st['seconds']:.2f} s" for st in r["stages"])
                     + f" (peak {max(st['peak_bytes'] for st in r['stages']) / 2**30:.2f} GiB)")
    if "deterministic" in r:  # reports written before --threads lack it
        lines.insert(1, f"  threads          {r['threads']} ({'deterministic' if r['deterministic'] else 'not deterministic'}"
                        f": {r['determinism']})")
    if "peers_per_part" in r:
        pp = r["peers_per_part"]
        lines.append(f"  peers            max {max(pp)}, mean {sum(pp) / len(pp):.1f} (ranks each exchanges halo rows with)")
    if r.get("tolerances"):
        bal = ",".join(f"{c}:{t:g}" for c, t in r["tolerances"].items())
        auto = r.get("auto")
        how = ""
        if auto:
            plain = auto["plain_metis_modelled_epoch_s"]
            how = (f" (auto: best of {len(auto['candidates'])} setting(s)"
                   + (f" of {len({c.get('method', 'metis') for c in auto['candidates']})} backend(s)")
                   + (f"; plain METIS {plain * 1e3:.4g} ms" if plain is not None else "") + ")")
        lines.append(f"  balance          {bal}{how}")
        if auto and auto.get("decided_by"):  # reports written before the error band lack it
            lines.append(f"  chosen by        {auto['decided_by']['why']}")
    if r.get("refine_skipped"):
        lines.append(f"  refinement       skipped: {r['refine_skipped']}")
    if r.get("skipped"):
        lines.append("  not tried        " + "; ".join(r["skipped"].values()))
    over = (r.get("auto") or {}).get("budget", {}).get("skipped")
    if over:
        b = r["auto"]["budget"]
        lines.append(f"  over budget      {len(over)} candidate(s) not run: auto's estimated time kept within "
                     f"{b['seconds']:.1f} s ({b['multiple']:g} x its cheapest, {b['cheapest']}; --auto-budget 0 "
                     f"runs all): {', '.join(over)}")
    if r.get("hetero"):
        lines.extend(format_hetero(r["hetero"]))
    if r.get("refine"):
        f = r["refine"]
        lines.append(f"  refinement       {f['moved']:,} nodes moved in {f['passes']} volume pass(es): max volume "
                     f"{f['max_volume_before']:,} -> {f['max_volume_after']:,}, total {f['comm_volume_before']:,} -> "
                     f"{f['comm_volume_after']:,}")
        if f.get("peers", {}).get("groups"):
            pr = f["peers"]
            lines.append(f"  peer pruning     {pr['moved']:,} nodes in {pr['groups']} group(s): max peers "
                         f"{pr['max_peers_before']} -> {pr['max_peers_after']}")
    return "\n".join(lines)
