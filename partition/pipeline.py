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
import torch
from gnndist.datasets.schema import schema_of
from gnndist.partition.backends import BACKENDS, resolve_threads
from gnndist.partition.balance import AUTO_BUDGET, loads_from_pairs, network, parse_balance
from gnndist.partition.book import (
    GlobalCSR,
    PartitionBook,
    build_local_parts,
    check_parts,
    edge_values_in_csr,
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
from gnndist.partition.format import drop_pages, write_partition
from gnndist.partition.hetero import RelationSlicer, hetero_report
from gnndist.partition.layouts import LayoutCounts, layout_counts
from gnndist.partition.link import VALEDGES, check_valedges, link_arrays, link_bytes, link_of, valedges_message
from gnndist.partition.metis import OBJECTIVES, random_assign
from gnndist.partition.progress import Stages, stages_of
from gnndist.partition.report import quality

from gnndist.cost import HIDDEN, Network, RankLoad, model_widths
from gnndist.errors import UserError
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

    def part_arrays(self, counts: LayoutCounts | None = None):
        """Yield each rank's arrays as saved on disk: graph, plans, features, labels, masks, and its row of every
        layout's exchanges (``layout_pairs``, from ``counts``: counted here when not given)."""
        counts = counts or layout_counts(self.csr, self.book.offsets, threads=self.threads)
        d = self.data
        ea = getattr(d, "edge_attr", None)  # [E, *] -> [nnz, *] in CSR order; each part takes its rows' slice
        ei = getattr(d, "edge_attr_index", None)  # the edge list edge_attr is aligned with (default: edge_index)
        ea = edge_values_in_csr(self.csr, self.book, d.edge_index if ei is None else ei, ea.numpy()) \
            if ea is not None else None
        # a typed graph: each part's CSR per relation (partition.hetero)
        relations = RelationSlicer(self.schema, self.book) if self.schema is not None else None
        link = link_of(d)
        mapped = getattr(d, "memmaps", ())
        for lp in self.local_parts():
            owned = lp.orig_id[: lp.n_owned]
            arrays = {**lp.arrays(), "x": gathered(d.x, owned, mapped), "y": gathered(d.y, owned, mapped)}
            arrays["layout_pairs"] = counts.part_pairs(lp.rank)
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
            if link is not None:  # a link-prediction split: this part's slice of every pair array
                arrays.update(link_arrays(link, self.book.old2new, lp.rank, self.book.parts))
            yield arrays
            for mm in getattr(d, "memmaps", ()):  # the rows gathered from memory-mapped inputs: not resident
                drop_pages(mm)

    def valedges(self, dataset: str, progress: bool = True) -> tuple[dict, object]:
        """META.json and the parts (a generator) of the sub-partition :data:`~gnndist.partition.link.VALEDGES`: this
        book over the message graph of training and validation edges, symmetrised and de-duplicated as the
        training graph is; its parts hold only their structure (:meth:`~gnndist.partition.book.LocalPart.arrays`)."""
        n, offsets = int(self.csr.num_nodes), self.book.offsets
        csr = renumbered_csr(symmetric_csr(valedges_message(self.data), n, threads=self.threads), self.book,
                             threads=self.threads)
        counts = layout_counts(csr, offsets, threads=self.threads)
        meta = {"dataset": dataset, "of": "the message graph of training + validation edges", "parts": self.book.parts,
                "N": n, "E": int(csr.nnz), "F": 0, "classes": 0, "offsets": offsets.tolist(), "layouts": counts.loads}
        parts = ({**lp.arrays(), "layout_pairs": counts.part_pairs(lp.rank)}
                 for lp in build_local_parts(csr, self.book, self.threads))
        return meta, stages_of(parts, self.book.parts, f"write {VALEDGES} part", progress)

    def save(self, out: str | Path, dataset: str, progress: bool = True, valedges: bool = False) -> Path:
        """Write the partition atomically to ``out`` (see :mod:`gnndist.partition.format`); with ``valedges``
        also the message graph of training and validation edges (``--use-valedges-as-input``: :meth:`valedges`,
        in ``out/valedges/``)."""
        if valedges:
            check_valedges(self.data, dataset)
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
        if self.schema is not None:
            meta["hetero"] = self.schema.to_meta()
        if link_of(d) is not None:
            meta["link"] = link_of(d).to_meta()
        if "featureless" in d and d.featureless:  # no features of its own (ogbl-ddi, SNAP): a link task learns rows
            meta["featureless"] = True
        st = Stages(1, "save", progress)
        st.set_postfix_str("layout loads")
        # per-rank loads (rows, messages, nonzeros) of every SpMM layout this P admits: auto reads them
        counts = layout_counts(self.csr, self.book.offsets, threads=self.threads)
        meta["layouts"] = counts.loads
        st.close()
        parts = stages_of(self.part_arrays(counts), self.book.parts, "write part", progress)
        inner = {VALEDGES: self.valedges(dataset, progress)} if valedges else None
        return write_partition(out, meta, parts, need_bytes=self.disk_bytes(valedges), inner=inner)

    def disk_bytes(self, valedges: bool = False) -> int:
        """What the saved parts take, from their shapes (within a few %: the halo's ids and the .npy headers aside);
        ``valedges``: with the sub-partition of training + validation edges (its entries, ids, degrees, rowptr)."""
        d, n, nnz = self.data, int(self.csr.num_nodes), int(self.csr.nnz)
        ea = getattr(d, "edge_attr", None)
        per_node = (d.x[:1].numel() * d.x.element_size() + d.y[:1].numel() * d.y.element_size() + 3
                    + 8 + 8 + 4)  # x, y, masks, orig_id, degree, rowptr (int32 below 2^31 local entries)
        if getattr(d, "train_masks", None) is not None:  # train / val / test masks of every stored split
            per_node += 3 * d.train_masks.shape[1]
        per_entry = self.csr.col.dtype.itemsize + (ea[:1].numel() * ea.element_size() if ea is not None else 0)
        link = link_of(d)
        extra = 0
        if valedges:  # at most 2 E_val entries more than the training graph's
            extra = n * (8 + 8 + 4) + (nnz + 2 * int(link.valid.shape[0])) * self.csr.col.dtype.itemsize
        return n * per_node + nnz * per_entry + (link_bytes(link, n) if link is not None else 0) + extra


def gathered(t: torch.Tensor, rows: np.ndarray, mapped=(), values: int = CHUNK) -> np.ndarray:
    """``t[rows]`` as numpy; with memory-mapped inputs (``mapped``), gathered ~``values`` values at a time,
    letting their pages go after each (``rows`` ascending: each gather reads one stretch of the file), so a
    part's rows never hold the whole file's pages (256 MiB of features at 1M nodes x 64).

    Shapes:
        t ``[N, *]``, rows ``[n]`` -> ``[n, *]``
    """
    if not mapped:
        return t[rows].numpy()
    src = t.numpy()
    out = np.empty((len(rows), *src.shape[1:]), dtype=src.dtype)
    step = max(values // max(int(np.prod(src.shape[1:])), 1), 1)
    for s in range(0, len(rows), step):
        np.take(src, rows[s : s + step], axis=0, out=out[s : s + step])
        for mm in mapped:
            drop_pages(mm)
    return out


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
