"""The partition pipeline: named stages over one frozen request, each returning what it made.

    req = request(data, parts=4)                          # the inputs, checked (PartitionRequest)
    csr = symmetrise(req)                                  # one symmetric CSR, original ids
    made = assign(req, csr, bar)                           # every node's part (choose: candidates, one kept)
    book, loads, cut = plans(req, csr, made.assign)        # the owners, every rank's 1D halo exchange
    report, csr = renumber(req, csr, made, book, loads, cut)  # the report (report.quality), the CSR in new ids
    hetero = types(req, book, csr)                         # a typed graph only: per type and relation

:func:`partition` runs them in that order (:data:`STAGES`), each stage's seconds and the process's peak
memory after it going into the report's ``stages``, and returns a :class:`Partition` to save.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gnndist.datasets.schema import schema_of
from gnndist.partition.backends import BACKENDS, resolve_threads
from gnndist.partition.balance import loads_from_pairs, network, parse_balance
from gnndist.partition.book import (
    GlobalCSR,
    PartitionBook,
    build_local_parts,
    check_parts,
    exchange_pairs,
    renumbered_csr,
    symmetric_csr,
)
from gnndist.partition.choose import (
    Assigned,
    PartitionRequest,
    balance_columns,
    candidates,
    chosen,
    partitioned,
    refined,
    runs_of,
)
from gnndist.partition.components import Component, held_by
from gnndist.partition.format import write_partition
from gnndist.partition.hetero import hetero_report
from gnndist.partition.layouts import LayoutCounts, layout_counts
from gnndist.partition.link import VALEDGES
from gnndist.partition.metis import OBJECTIVES, random_assign
from gnndist.partition.plan import AUTO_BUDGET
from gnndist.partition.progress import Stages, stages_of
from gnndist.partition.report import quality
from gnndist.partition.subparts import SUB_PARTITIONS, SubPartition

from gnndist.cost import HIDDEN, Network, RankLoad, model_widths
from gnndist.errors import UserError
from gnndist.files import drop_pages
from gnndist.machine import CHUNK, pin_mmap_threshold, rss_peak

METHODS = ("auto", *BACKENDS)
STAGES = ("symmetrise", "assign", "plans", "renumber")  # and "types" after them on a typed graph


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
    schema: object | None = None  # a typed graph's HeteroSchema (schema_of(data)), else None

    def local_parts(self):
        """Yield each rank's :class:`LocalPart` in rank order."""
        return build_local_parts(self.csr, self.book, self.threads)

    def components(self) -> list[Component]:
        """What the parts hold: every :data:`~gnndist.partition.components.COMPONENTS` entry this graph has."""
        return held_by(self)

    def part_arrays(self, counts: LayoutCounts | None = None):
        """Yield each rank's arrays as saved on disk: every component's (:meth:`components`), in their order; the
        layouts' exchanges from ``counts`` (counted here when not given)."""
        counts = counts or layout_counts(self.csr, self.book.offsets, threads=self.threads)
        writers = [c.writer(self, counts) for c in self.components()]
        mapped = getattr(self.data, "memmaps", ())
        for lp in self.local_parts():
            arrays: dict = {}
            for write in writers:
                arrays.update(write(lp))
            yield arrays
            for mm in mapped:  # the rows gathered from memory-mapped inputs: not resident
                drop_pages(mm)

    def save(self, out: str | Path, dataset: str, progress: bool = True, valedges: bool = False) -> Path:
        """Write the partition atomically to ``out`` (see :mod:`gnndist.partition.format`); with ``valedges``
        also the sub-partition of training and validation edges (``--use-valedges-as-input``, in ``out/valedges/``:
        :data:`~gnndist.partition.subparts.SUB_PARTITIONS`)."""
        subs = self.sub_partitions(valedges)
        for sub in subs:
            sub.check(self.data, dataset)
        meta = {"dataset": dataset, "parts": self.book.parts, "method": self.method, "objective": self.objective,
                "seed": self.seed, "N": int(self.csr.num_nodes), "E": int(self.csr.nnz)}
        for c in self.components():
            meta.update(c.meta(self))
        meta.update(offsets=self.book.offsets.tolist(), report=self.report)
        st = Stages(1, "save", progress)
        st.set_postfix_str("layout loads")
        # per-rank loads (rows, messages, nonzeros) of every SpMM layout this P admits: auto reads them
        counts = layout_counts(self.csr, self.book.offsets, threads=self.threads)
        meta["layouts"] = counts.loads
        st.close()
        parts = stages_of(self.part_arrays(counts), self.book.parts, "write part", progress)
        inner = {sub.name: sub.build(self, dataset, progress) for sub in subs}
        return write_partition(out, meta, parts, need_bytes=self.disk_bytes(valedges), inner=inner or None)

    @staticmethod
    def sub_partitions(valedges: bool = False) -> list[SubPartition]:
        """The sub-partitions a save writes beside the parts: ``valedges`` with ``valedges``."""
        return [SUB_PARTITIONS[VALEDGES]] if valedges else []

    def disk_bytes(self, valedges: bool = False) -> int:
        """What the saved parts take, from their shapes (within a few %: the halo's ids and the .npy headers aside):
        every component's; ``valedges``: with the sub-partition of training + validation edges."""
        return (sum(c.disk_bytes(self) for c in self.components())
                + sum(sub.disk_bytes(self) for sub in self.sub_partitions(valedges)))


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
            candidates skipped and why are in the report (:func:`~gnndist.partition.plan.budget_plan`).
            0: no budget, every candidate runs.
    """
    req = request(data, parts, method, objective, seed, balance, refine, cost_network, widths, threads, chunk,
                  auto_budget)
    return run(req, progress)


def request(data, parts: int, method: str = "auto", objective: str = "vol", seed: int = 0,
            balance: str | tuple[str, ...] = "auto", refine: bool = True, cost_network: str | Network | None = None,
            widths: tuple[int, ...] | None = None, threads: int = 0, chunk: int = CHUNK,
            auto_budget: float = AUTO_BUDGET) -> PartitionRequest:
    """The :class:`~gnndist.partition.choose.PartitionRequest` of :func:`partition`'s arguments, each checked
    (a bad one: a one-line :class:`UserError` naming its flag)."""
    if method not in METHODS:
        raise UserError(f"--method must be one of {list(METHODS)}, got {method!r}")
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    check_budget(auto_budget)
    check_parts(int(data.num_nodes), parts)
    setting = parse_balance(balance)
    schema = schema_of(data)
    if setting is not None and "types" in setting.constraints and schema is None:
        raise UserError("--balance types balances every node type of a heterogeneous graph; this graph has one node "
                        "type (balance nodes)")
    return PartitionRequest(data, parts, method, objective, seed, setting, refine, network(cost_network),
                            widths or model_widths_of(data), resolve_threads(threads), chunk, auto_budget, schema)


def check_budget(budget: float) -> None:
    """``--auto-budget``: 0 (no budget) or a multiple >= 1; a one-line :class:`UserError` otherwise."""
    if not (budget == 0 or 1 <= budget < float("inf")):
        raise UserError(f"--auto-budget must be 0 (no budget) or a number >= 1, got {budget!r}")


def run(req: PartitionRequest, progress: bool = True) -> Partition:
    """The stages of :data:`STAGES` over ``req`` in order (and ``types`` on a typed graph), timed."""
    names = STAGES + (("types",) if req.schema is not None else ())
    pin_mmap_threshold()  # a stage's freed arrays go back to the system: the stages' peaks do not stack up in the heap
    stage = _Timed(Stages(len(names), f"partition into {req.parts}", progress), req.method)
    csr = stage("symmetrise", symmetrise, req)
    made = stage("assign", assign, req, csr, stage.bar)
    book, loads, cut = stage("plans", plans, req, csr, made.assign)
    report, csr = stage("renumber", renumber, req, csr, made, book, loads, cut)
    hetero = stage("types", types, req, book, csr) if req.schema is not None else None
    stage.bar.close()
    report["stages"] = stage.stages
    if hetero is not None:
        report["hetero"] = hetero
    return Partition(req.data, book, csr, req.method, made.objective, req.seed, report, req.threads, req.schema)


class _Timed:
    """Runs one stage at a time: names it on the bar (the assign stage by the method), then records its
    seconds and the process's peak memory after it (the report's ``stages``)."""

    def __init__(self, bar: Stages, method: str):
        self.bar, self.method, self.stages = bar, method, []

    def __call__(self, name: str, stage, *args):
        self.bar.set_postfix_str(self.method if name == "assign" else name)
        t0 = time.perf_counter()
        out = stage(*args)
        self.stages.append({"stage": name, "seconds": round(time.perf_counter() - t0, 3), "peak_bytes": rss_peak()})
        self.bar.update()
        return out


def symmetrise(req: PartitionRequest) -> GlobalCSR:
    """The graph as one symmetric CSR without self-loops or duplicates, built in chunks on every thread
    (original ids); the pages of memory-mapped inputs read for it are let go."""
    csr = symmetric_csr(req.data.edge_index, int(req.data.num_nodes), req.chunk, req.threads)
    for mm in getattr(req.data, "memmaps", ()):  # a memory-mapped edge list was read once: its pages go
        drop_pages(mm)
    return csr


def assign(req: PartitionRequest, csr: GlobalCSR, bar: Stages) -> Assigned:
    """Every node's part: the baseline, or each candidate (backend, setting) of
    :func:`~gnndist.partition.choose.candidates` partitioned (each run once, named on ``bar``) and refined,
    one kept (:func:`~gnndist.partition.choose.chosen`)."""
    t0 = time.perf_counter()
    n = csr.num_nodes
    mask = getattr(req.data, "train_mask", None)
    train = mask.numpy().astype(np.int64) if mask is not None else np.zeros(n, dtype=np.int64)
    if req.method == "random":
        made = random_assign(n, req.parts, req.seed)
        return Assigned(made, "random", req.setting, req.objective, train, time.perf_counter() - t0)
    columns = balance_columns(req, csr, train)
    plan = candidates(req, csr, columns)
    runs: dict = {}  # (backend, setting) -> the partitioner's assignment; a derived setting's first one too
    tried = []
    for b, s in plan.candidates:
        for key in runs_of(b, s):
            if key not in runs:
                bar.set_postfix_str(f"{key[0]} {key[1].label}")
                runs[key] = partitioned(req, csr, plan, columns, *key, runs)
        if plan.refine and s.constraints:
            bar.set_postfix_str(f"refine {b} {s.label}")
        tried.append(refined(req, csr, plan, columns, b, s, runs[b, s]))
    return chosen(req, plan, tried, train, time.perf_counter() - t0)


def plans(req: PartitionRequest, csr: GlobalCSR, parts_of: np.ndarray) -> tuple[PartitionBook, list[RankLoad], int]:
    """Who owns what (the book), every rank's 1D halo exchange (rows sent and received, peers) and the edge cut."""
    book = PartitionBook(req.parts, parts_of)
    pair, cut = exchange_pairs(csr, parts_of, req.parts, req.chunk, req.threads)
    return book, loads_from_pairs(pair, csr, parts_of), cut


def renumber(req: PartitionRequest, csr: GlobalCSR, made: Assigned, book: PartitionBook, loads: list[RankLoad],
             cut: int) -> tuple[dict, GlobalCSR]:
    """The report (read off the original ids before they go, :func:`~gnndist.partition.report.quality`) and
    the CSR in new ids: part k owns one contiguous range."""
    report = quality(req, csr, made, book, loads, cut)
    return report, renumbered_csr(csr, book, req.chunk, req.threads)


def types(req: PartitionRequest, book: PartitionBook, csr: GlobalCSR) -> dict:
    """A typed graph's report: nodes and halo rows per type, edges per relation, of every part (new ids)."""
    return hetero_report(req.schema, book, csr)
