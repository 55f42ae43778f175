"""``DistGraph``: one rank's rows of the graph, read-only, and aggregation on them through its strategy.

``DistGraph`` holds what the partition stored for this rank and what is derived from it
once, at load: the rows it owns (features, labels, masks, dataset ids, global degrees), the
part's :class:`Structure` (its rows of ``A`` in local ids, the halo ids, the 1D send plans)
and the strategy built on that structure. Local ids: ``[0, n_owned)`` are this rank's nodes,
``[n_owned, n_owned + n_halo)`` the 1D halo, grouped by owner rank.

Nothing assigns to a graph after it is built (an assignment raises): what changes from step
to step (seed, epoch, recomputation, bytes, phase times) lives in ``graph.context``
(:class:`~gnndist.context.RunContext`), which the trainer opens around each step.

Layers aggregate with :meth:`DistGraph.spmm` (linear aggregation: the run's strategy,
per layer under ``auto``) or take the 1D halo with :meth:`DistGraph.extend` for per-edge
messages (attention, custom messages), which always run on the ``1d`` layout.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnndist.config import DistConfig, TrainConfig
from gnndist.context import RunContext
from gnndist.datasets.schema import HeteroSchema
from gnndist.dist.comm import fold, gather
from gnndist.dist.grid import ProcessGrid, together
from gnndist.dist.timing import bracket
from gnndist.errors import UserError
from gnndist.kernels import CSR, DTYPES, KernelSettings, dropout, settings_from_config
from gnndist.kernels.csr import degree_divisor
from gnndist.kernels.dropout.reference import apply_dropout, cell_bits, node_keys
from gnndist.partition.format import drop_pages
from gnndist.partition.link import LINK_PREFIX
from gnndist.sparse_rows import SPARSE_FEATURES, SparseRows, rows_of
from gnndist.strategies import Halo1D, Strategy, Structure, strategy_from_config

SPLIT_ARRAYS = ("train_masks", "val_masks", "test_masks")  # a partition's stored splits, [n_owned, K] bool each
ROW_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask") + SPLIT_ARRAYS


def _sparse_dropout(rows: SparseRows, keys: Tensor, p: float) -> SparseRows:
    """Dropout of mostly-zero rows at their nonzero cells alone: the dense mask's cells, ``O(nnz)``."""
    drop = cell_bits(keys[rows.csr.row.long()], rows.csr.col) < int(p * 2**31)  # [nnz]
    return rows.with_values(apply_dropout(rows.values, drop, p))


def feature_density(x: Tensor, grid: ProcessGrid) -> float:
    """The share of nonzero cells in the features over every rank (collective: one all-reduce, the same on all)."""
    counts = torch.tensor([float(torch.count_nonzero(x)), float(x.numel())], dtype=torch.float64, device=x.device)
    nonzero, cells = grid.all_reduce_(counts).tolist()
    return nonzero / cells if cells else 1.0


def _tensor(arr: np.ndarray, device: torch.device) -> Tensor:
    """``arr`` as a tensor on ``device``, sharing its memory on the CPU (a mapped part's pages: no copy at load).

    A part's arrays are read-only (memory-mapped): nothing writes to a loaded part (the graph is
    read-only, every transform makes a new tensor), so torch's warning about them is not raised.
    """
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(arr).to(device)


def compute_dtype(x: Tensor) -> Tensor:
    """``x`` in the autocast dtype of its device where autocast is on (the aggregations' inputs), else ``x``.

    The one place that decides what dtype an aggregation and its exchange see: ``--precision bf16|fp16``
    runs the model under ``torch.autocast``, whose dtype torch keeps per thread.
    """
    dev = x.device.type
    if x.is_floating_point() and torch.is_autocast_enabled(dev):
        return x.to(torch.get_autocast_dtype(dev))
    return x


def normalize_rows(x: Tensor, grid: ProcessGrid) -> Tensor:
    """Rows scaled to sum 1 (Kipf & Welling) unless some feature on some rank is negative; exact for any P.

    Collective: whether any feature is negative is decided over every rank (row sums of
    signed features are no scale, so those are left alone on every rank alike).
    """
    negative = grid.all_reduce_((x < 0).any().double().view(1))  # [1]
    if negative.item() > 0:
        return x
    return x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)  # per node: the same for every partition


def _node_types(schema: HeteroSchema | None, orig_id: Tensor) -> Tensor | None:
    """The type index of every local node of a typed graph (its dataset id's range), else None."""
    if schema is None:
        return None
    offsets = torch.tensor(schema.offsets, dtype=torch.int64, device=orig_id.device)
    return torch.searchsorted(offsets, orig_id.long(), right=True) - 1


def _relations(t: dict, n_owned: int, n_halo: int) -> tuple[CSR, ...]:
    """One CSR per relation of a typed graph's part (``rel_rowptr`` ``[R, n_owned + 1]``, ``rel_col``), else ();
    in the dtype stored (int32 since partition format 2, int64 before: both index the kernels' CSRs)."""
    if "rel_rowptr" not in t:
        return ()
    rowptr, col = t["rel_rowptr"], t["rel_col"]
    return tuple(CSR(rp - rp[0], col[rp[0] : rp[-1]], n_owned + n_halo) for rp in rowptr)


def _structure(arrays: dict, t: dict[str, Tensor], meta: dict, rank: int, device: torch.device) -> Structure:
    """The :class:`Structure` of a part's arrays (``arrays``, numpy: its rows of ``A`` stay as stored, mapped;
    ``t``: the others as tensors) and its partition's META.json."""
    return Structure(rank, len(arrays["rowptr"]) - 1, arrays["rowptr"], arrays["col"], t["halo_gid"], t["send_idx"],
                     t["send_counts"].tolist(), t["recv_counts"].tolist(), tuple(int(o) for o in meta["offsets"]),
                     meta.get("layouts") or {}, device,
                     np.asarray(arrays["layout_pairs"]) if "layout_pairs" in arrays else None)


def meta_digest(meta: dict) -> str:
    """A short digest of a partition's META.json as read (every rank of a job must read the same)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


class DistGraph:
    """One rank's part of a partitioned graph, read-only; layers call :meth:`spmm`, :meth:`halo`, :meth:`extend`.

    Args:
        arrays: the part's arrays (see :mod:`gnndist.partition`), as numpy.
        meta: the partition's META.json.
        grid: the process grid (a solo grid by default).
        strategy: aggregation strategy, a name (``1d``, ``1.5d``, ``2d``, ``auto``) or an
            unbuilt :class:`~gnndist.strategies.Strategy` (default ``1d``); built here, on
            every rank at once.
        comm_dtype: dtype the exchanged rows travel in, ``"fp32"`` (default: their own), ``"bf16"`` or
            ``"fp16"`` (rows of another dtype are cast for the wire and back on receipt, so fp32 arithmetic
            stays fp32; under ``--precision bf16|fp16`` the rows are in that dtype already, and travel as
            they are: :attr:`TrainConfig.wire_dtype <gnndist.config.TrainConfig.wire_dtype>` gives it).
        kernel: the kernels of every aggregation, a :class:`~gnndist.kernels.KernelSettings`
            (default: chosen per input by the dispatcher, SpMM tiles tuned).
        normalize_features: row-normalise the features at load (:func:`normalize_rows`; collective).
        sparse_features: ``"auto"`` (default): the features are taken as sparse where under
            :data:`~gnndist.sparse_rows.SPARSE_FEATURES` of their cells are nonzero over every rank (collective);
            ``"on"``: always; ``"off"``: never (:attr:`sparse_features`, :meth:`input_rows`).
        context: the run's :class:`~gnndist.context.RunContext` (a fresh one by default).
        root: the partition directory the part was read from, where :meth:`sub_partition` finds the other
            structures it stores (None: arrays handed in, no sub-partitions).
    """

    def __init__(self, arrays: dict, meta: dict, grid: ProcessGrid | None = None,
                 strategy: Strategy | None = None, comm_dtype: str = "fp32", kernel: KernelSettings | None = None,
                 normalize_features: bool = False, context: RunContext | None = None, root: str | Path | None = None,
                 sparse_features: str = "auto"):
        grid = grid or ProcessGrid()
        dev = grid.device
        # the part's rows of A stay as stored (mapped): the strategy reads them into its own block
        t = {k: _tensor(v, dev) for k, v in arrays.items() if k not in ("rowptr", "col", "layout_pairs")}
        structure = _structure(arrays, t, meta, grid.rank, dev)
        n_owned, n_halo = structure.n_owned, structure.n_halo
        context = context or RunContext(grid.is_main)
        kernel = kernel or KernelSettings()
        wire = None if comm_dtype == "fp32" else DTYPES[comm_dtype]  # None: the rows travel as they are
        strat = strategy or Halo1D()  # by name, with options: gnndist.strategies.strategy_from_config
        grid.agree(meta_digest(meta), "partition (META.json differs: hosts that see different partitions at one "
                   "path, or one re-made while the job read it)", must_match=True)
        strat.build(structure, grid, context.counter, kernel, wire)
        degree = t["degree"]  # [n_owned + n_halo] global degree, no self-loops
        schema = HeteroSchema.from_meta(meta["hetero"]) if "hetero" in meta else None
        x = t["x"]  # [n_owned, F]
        if normalize_features:
            x = normalize_rows(x, grid)
            if x is not t["x"]:
                drop_pages(arrays["x"])  # the stored rows were read once: only the normalised ones stay
        self._set(
            grid=grid, meta=meta, root=root, context=context, structure=structure, strategy=strat, kernel=kernel,
            comm_dtype=wire, n_owned=n_owned, n_halo=n_halo,
            halo_gid=structure.halo_gid,  # [n_halo] global (new) ids of the halo
            orig_id=t["orig_id"],  # [n_owned + n_halo] dataset ids
            degree=degree,
            # (d_i + 1)^(-1/2): GCN's symmetric normalisation with self-loops, global degrees (its one home;
            # spmm(weight="gcn") scales by the owned rows', per-edge layers by both ends': LocalEdges.gcn_weight)
            gcn_scale=(degree.double() + 1.0).rsqrt(),  # [n_owned + n_halo] float64
            edge_attr=t.get("edge_attr"),  # [nnz, *] features of the local edges in CSR order, or None
            x=x,  # [n_owned, F]: the part's own pages unless normalised
            features_normalized=normalize_features,
            # under SPARSE_FEATURES of the cells nonzero over every rank: dropout at the nonzeros, and a first linear
            # map that asks for it takes SparseRows (input_rows)
            feature_density=(density := feature_density(x, grid)),
            sparse_features=density < SPARSE_FEATURES if sparse_features == "auto" else sparse_features == "on",
            y=t["y"],  # [n_owned] (or [n_owned, T] multi-label)
            train_mask=t["train_mask"], val_mask=t["val_mask"], test_mask=t["test_mask"],  # [n_owned] each
            num_train=int(meta.get("num_train", 0)),
            splits={k: t[k] for k in SPLIT_ARRAYS if k in t},  # [n_owned, K] each: every split the partition holds
            num_classes=int(meta["classes"]), num_nodes=int(meta["N"]),
            # a typed graph (META.json's "hetero", None otherwise): its HeteroSchema, the type of every local node
            # and one CSR per relation, [n_owned, n_owned + n_halo] in local ids (partition.hetero)
            hetero=schema,
            node_type=_node_types(schema, t["orig_id"]),  # [n_owned + n_halo] type index, or None
            relations=_relations(t, n_owned, n_halo),
            relation_of=None,  # (r, the union graph) for a view of one relation (relation(r)), else None
            # a link-prediction split (META.json's "link"): this rank's slice of each pair array and of the id
            # directory, by name (train, valid, valid_neg, test, test_neg, home; partition.link), else None
            link={k.removeprefix(LINK_PREFIX): v for k, v in t.items() if k.startswith(LINK_PREFIX)} or None,
            _derived={},
        )

    @property
    def csr(self) -> CSR:
        """The rank's rows of ``A`` in local ids ``[n_owned, n_owned + n_halo]`` (per-edge layers, adapters):
        read from the part on first use and kept (a layout keeps its own block; a GCN never asks)."""
        return self.derived("csr", lambda: self.structure.csr)

    def _set(self, **fields: Any) -> None:
        for k, v in fields.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"DistGraph is read-only: cannot assign {name!r} (what changes per step lives in "
                             f"graph.context; another split is graph.with_split(k))")

    @staticmethod
    def read(root: str | Path, grid: ProcessGrid) -> tuple[dict, dict]:
        """This rank's arrays and the partition's META.json (local: no collective); the world must match the parts."""
        from gnndist.partition import read_meta, read_part

        meta = read_meta(root)
        if meta["parts"] != grid.world_size:
            raise UserError(
                f"{root} has {meta['parts']} parts but the world has {grid.world_size} ranks: "
                f"use --ranks {meta['parts']} or re-partition with --parts {grid.world_size}"
            )
        return read_part(root, grid.rank, meta), meta

    @classmethod
    def load(cls, root: str | Path, grid: ProcessGrid, **kw) -> DistGraph:
        """Load this rank's part (the keywords of :class:`DistGraph`; collective: the strategy is built)."""
        return cls(*cls.read(root, grid), grid, root=root, **kw)

    @classmethod
    def from_config(cls, arrays: dict, meta: dict, grid: ProcessGrid, cfg: TrainConfig, dist: DistConfig | None = None,
                    comm_dtype: str | None = None, root: str | Path | None = None) -> DistGraph:
        """The graph a run of ``cfg`` trains on: ``cfg.dist``'s strategy, rows on the wire in ``cfg.wire_dtype``,
        ``cfg.kernel``'s kernels, features normalised at load where ``cfg.model.normalize_features`` (collective:
        the strategy is built). The one way a config becomes a graph.

        Args:
            arrays: this rank's part (:meth:`read`).
            meta: its META.json (:meth:`read`).
            dist: the layout in place of ``cfg.dist`` (``gnndist predict``'s ``--strategy``, a test's layout).
            comm_dtype: in place of ``cfg.wire_dtype`` (``gnndist predict``, in fp32: ``"fp32"``).
            root: the partition directory they were read from (its sub-partitions: :meth:`sub_partition`).
        """
        strategy = strategy_from_config(dist or cfg.dist)
        return cls(arrays, meta, grid, strategy=strategy, comm_dtype=comm_dtype or cfg.wire_dtype,
                   kernel=settings_from_config(cfg.kernel), normalize_features=cfg.model.normalize_features, root=root,
                   sparse_features=cfg.model.sparse_features)

    def with_split(self, k: int) -> DistGraph:
        """The same graph training, validating and testing on split ``k`` of the partition's splits.

        Collective: the global training count is summed over ranks. Everything but the masks is shared.
        """
        if not self.splits:
            raise UserError(f"{self.meta.get('dataset')}: the partition holds no splits to choose from")
        train, val, test = (self.splits[name][:, k] for name in SPLIT_ARRAYS)  # [n_owned] each
        count = torch.tensor([float(train.sum())], dtype=torch.float64, device=self.grid.device)
        other = object.__new__(DistGraph)
        other._set(**{**vars(self), "train_mask": train, "val_mask": val, "test_mask": test,
                      "num_train": int(self.grid.all_reduce_(count).item())})
        return other

    def relation(self, r: int) -> DistGraph:
        """The same part with relation ``r``'s rows of ``A`` in place of the union graph's (a typed graph's).

        Everything a layer reads is relation ``r``'s: :attr:`csr`, :meth:`spmm` (on a 1D layout of the relation
        built over the part's own halo and plans: a row a relation does not read still travels), the degrees
        (``mean`` divides by the relation's in-degree; ``weight="gcn"`` needs a relation inside one type, whose
        halo rows' degrees come from their owners once, here). Rows, masks, ids and the run's context are
        shared. Built once per relation (collective: every rank asks for the same relations in the same order).
        """
        def build() -> DistGraph:
            if not 0 <= r < len(self.relations):
                raise ValueError(f"relation {r} of a graph with {len(self.relations)} relations")
            csr = self.relations[r]
            rowptr, col = csr.rowptr.cpu().numpy(), csr.col.cpu().numpy()
            structure = dataclasses.replace(self.structure, rowptr=rowptr, col=col)
            strategy = Halo1D(symmetric=False)
            strategy.build(structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)
            owned = torch.from_numpy(np.diff(rowptr)).to(self.degree.device, self.degree.dtype)  # [n_owned]
            src, _, dst = self.hetero.relations[r]
            if src == dst:  # symmetric (the loader made it so): a halo row's in-degree is its owner's row count
                halo = gather(owned[:, None].double(), strategy.block.expand, self.context.counter,
                              f"relation{r}/degree")[:, 0].to(owned.dtype)
            else:  # no node is both a source and a destination: no symmetric normalisation
                halo = torch.full((self.n_halo,), -1, dtype=owned.dtype, device=owned.device)
            degree = torch.cat([owned, halo])  # [n_owned + n_halo]
            view = object.__new__(DistGraph)
            view._set(**{**vars(self), "structure": structure, "strategy": strategy, "degree": degree,
                         "gcn_scale": (degree.double() + 1.0).rsqrt(), "edge_attr": None, "_derived": {},
                         "relation_of": (r, self)})
            return view

        return self.derived(("relation", r), build)

    def sub_partition(self, name: str, strategy: Strategy | None = None) -> DistGraph:
        """The same rows over another structure the partition stores for the same owners: its sub-partition ``name``
        (:func:`~gnndist.partition.format.write_partition`'s ``inner``, e.g. ``valedges``: the message graph of
        training + validation edges, :mod:`gnndist.partition.link`).

        The sub-partition was made with the same book: this rank owns the same nodes under the same local ids
        ``[0, n_owned)``, so the features, rows, masks, ids of owned nodes, link arrays and the run's context are
        shared; its rows of ``A``, halo, plans, halo ids and degrees (GCN's and ``mean``'s) are its own, read as
        the part's are and aggregated by ``strategy`` (unbuilt; default ``1d``). Built once per name (collective:
        every rank asks for the same sub-partitions in the same order); its block is what it costs in memory.
        """
        def build() -> DistGraph:
            from gnndist.partition.format import read_inner, read_part

            def read() -> tuple[dict, dict]:  # local; a failure on any rank stops every rank at once
                if self.root is None or self.hetero is not None or self.relation_of is not None:
                    raise UserError(f"sub-partition {name}: only a homogeneous graph read from its partition "
                                    f"directory (DistGraph.load, from_config(..., root=)) has sub-partitions")
                meta = read_inner(self.root, name, self.meta)
                arrays = read_part(Path(self.root) / name, self.grid.rank, meta)
                owned = np.asarray(arrays["orig_id"][: self.n_owned])
                if (meta["offsets"] != self.meta["offsets"] or len(arrays["rowptr"]) - 1 != self.n_owned
                        or not np.array_equal(owned, self.orig_id[: self.n_owned].cpu().numpy())):
                    raise UserError(f"{Path(self.root) / name}: not a structure over this partition's owners")
                return arrays, meta

            arrays, meta = together(self.grid, read, f"another rank could not load its part of {name}")
            dev = self.grid.device
            t = {k: _tensor(v, dev) for k, v in arrays.items() if k not in ("rowptr", "col", "layout_pairs")}
            structure = _structure(arrays, t, meta, self.grid.rank, dev)
            self.grid.agree(meta_digest(meta), f"partition {name} (META.json differs)", must_match=True)
            strat = strategy or Halo1D()
            strat.build(structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)
            degree = t["degree"]  # [n_owned + n_halo] its own global degrees, no self-loops
            view = object.__new__(DistGraph)
            view._set(**{**vars(self), "structure": structure, "strategy": strat, "n_halo": structure.n_halo,
                         "halo_gid": structure.halo_gid, "orig_id": t["orig_id"], "degree": degree,
                         "gcn_scale": (degree.double() + 1.0).rsqrt(), "edge_attr": None, "_derived": {}})
            return view

        return self.derived(("sub_partition", name), build)

    def derived(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()``'s value, computed once per graph (structure derived from the part: local edges, ...)."""
        if key not in self._derived:
            self._derived[key] = build()
        return self._derived[key]

    # ------------------------------------------------------------------ exchange (1d layout)
    @property
    def layout1d(self) -> Halo1D:
        """The partition's own 1D layout (per-edge layers use it whatever the run's strategy; built on first use)."""
        own = self.strategy.halo_layout()
        if own is not None:
            return own

        def build() -> Halo1D:
            layout = Halo1D()
            layout.build(self.structure, self.grid, self.context.counter, self.kernel, self.comm_dtype)  # collective
            return layout

        return self.derived("layout1d", build)

    def halo(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Halo rows of ``x`` from their owners (differentiable), on the 1D layout.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_halo, F]``
        """
        if self.strategy.halo_layout() is None:
            layer = tag.split("/")[0]
            self.context.say_once(f"edge:{layer}", f"{layer}: per-edge messages run on the 1d layout")
        return gather(compute_dtype(x), self.layout1d.block.expand, self.context.counter, tag)

    def fold_halo(self, rows: Tensor, tag: str = "halo") -> Tensor:
        """The adjoint of :meth:`halo`: halo rows ``[n_halo, F]`` sent to their owners and summed there
        ``[n_owned, F]``."""
        return fold(rows, self.layout1d.block.expand, self.n_owned, self.context.counter, tag)

    def extend(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Owned rows followed by halo rows: the input a local-graph layer needs.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned + n_halo, F]``
        """
        x = compute_dtype(x)
        return torch.cat([x, self.halo(x, tag)], dim=0)

    # ------------------------------------------------------------------ aggregation
    def spmm(self, x: Tensor, weight: str | None = None, reduce: str = "sum", tag: str = "halo") -> Tensor:
        """Aggregate neighbours of every owned row: ``out[i] = reduce_j w_ij x[j]``, with the run's strategy.

        Args:
            x: owned rows of the node features.
            weight: ``None`` (all ones) or ``"gcn"`` (``D^-1/2 (A + I) D^-1/2``: the rows are
                scaled by ``D^-1/2`` on both sides of the sum, so strategies only sum).
            reduce: ``"sum"`` or ``"mean"`` (over the row's full neighbourhood).
            tag: name the exchanges' bytes are counted under (the layer), and under which
                ``auto`` remembers its choice.

        Under autocast (``--precision bf16|fp16``) ``x`` is cast to the autocast dtype first: its halo rows
        travel in it, the kernels accumulate in fp32 and the result is in it.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned, F]``
        """
        x = compute_dtype(x)
        self.context.record_spmm(tag, x.shape[1], backward=torch.is_grad_enabled() and x.requires_grad,
                                 itemsize=x.element_size())
        if weight == "gcn":
            src, rel, dst = self.hetero.relations[self.relation_of[0]] if self.relation_of else ("", "", "")
            if src != dst:
                raise ValueError(f"weight='gcn' (symmetric normalisation) on relation ({src}, {rel}, {dst}) "
                                 f"between two node types: use a layer without it (SAGEConv, GraphConv)")
            dinv = self.derived("gcn_dinv", lambda: self.gcn_scale[: self.n_owned].float())  # [n_owned] float32
            dinv = dinv.to(x.dtype)[:, None]  # [n_owned, 1]
            y = dinv * x  # D^-1/2 (A + I) D^-1/2 x = D^-1/2 (A y + y): three passes over [n, F], not four
            # in place on the aggregate (a fresh tensor no backward needs): no further [n, F] buffers
            return self._aggregate(y, tag).add_(y).mul_(dinv)
        if weight is not None:
            raise ValueError(f"unknown weight {weight!r}")
        out = self._aggregate(x, tag)  # [n_owned, F]
        if reduce == "mean":
            out = out / degree_divisor(self.degree[: self.n_owned], out.dtype)[:, None]
        elif reduce != "sum":
            raise ValueError(f"unknown reduce {reduce!r}")
        return out

    def _aggregate(self, x: Tensor, tag: str) -> Tensor:
        """The strategy's SpMM, timed as ``aggregation`` forward and backward (its exchange waits as ``comm``)."""
        return bracket(self.context.timer, "aggregation", lambda h: self.strategy.spmm(h, tag), x)

    def predicted_bytes(self) -> dict[str, dict[str, int]]:
        """This rank's bytes per layer as its layouts predict them for the SpMMs of the step in progress."""
        out = {}
        for tag, call in self.context.calls.items():
            b = self.strategy.layout_for(tag).bytes(call.width, self.wire_itemsize(call.itemsize))
            with_backward = call.count - call.forward_only
            out[tag] = {k: v * (with_backward if k.startswith("bwd") else call.count) for k, v in b.items()}
        return out

    def wire_itemsize(self, itemsize: int = 4) -> int:
        """Bytes per exchanged element of rows of ``itemsize`` bytes: the wire dtype's where one is set."""
        return self.comm_dtype.itemsize if self.comm_dtype else itemsize

    # ------------------------------------------------------------------ randomness
    def dropout(self, x: Tensor | SparseRows, p: float, key: int, training: bool = True,
                sparse: bool = False) -> Tensor | SparseRows:
        """Dropout whose mask depends on (seed, epoch, key, dataset node id): the same for every P.

        The seed and epoch are the step's (``graph.context``). On the input features (``x is graph.x``) with
        mostly zero entries (:attr:`feature_density` under :data:`~gnndist.sparse_rows.SPARSE_FEATURES`), the mask
        is only evaluated at their nonzeros (the same result at ``O(nnz)``), and with ``sparse`` (where
        :attr:`sparse_features`: ``--sparse-features``) they stay sparse: :class:`~gnndist.sparse_rows.SparseRows`,
        in training and in evaluation, for a first layer that only maps them linearly (``nn.Linear``, ``@``).
        Dense features under autocast come out in the autocast dtype (:func:`compute_dtype`), as the first
        layer would cast them: the backward then rebuilds the dropped half rows instead of keeping autocast's
        copy of them.

        Shapes:
            x ``[n_owned, F]``
        """
        rows = self.input_rows(x) if sparse else x
        if not training or p == 0.0:
            return rows
        step = self.context.current
        keys = node_keys(self.orig_id[: x.shape[0]], step.seed, step.epoch, key)  # [n_owned]
        if isinstance(rows, SparseRows):
            return _sparse_dropout(rows, keys, p)
        features = x is self.x and self.feature_density < SPARSE_FEATURES
        dtype = compute_dtype(x[:0]).dtype if x is self.x else x.dtype
        version = x._version
        def build() -> Tensor:  # the same cells again, for a backward that saved the output (the step's hooks)
            assert x._version == version, "a dropout's input was modified in place before the backward"
            out = _sparse_dropout(self.nonzeros(), keys, p).to_dense() if features else dropout(x, keys, p)
            return out.to(dtype)  # the dispatcher's dropout: one fused Triton pass on CUDA
        return self.context.rebuildable(build(), build)

    def input_rows(self, x: Tensor) -> Tensor | SparseRows:
        """The input features as :class:`~gnndist.sparse_rows.SparseRows` where ``x`` is them and they are mostly
        zeros (:attr:`sparse_features`; kept for the run at 8 B per nonzero), else ``x`` itself.

        For a first linear map that takes ``x`` with no dropout before it; :meth:`dropout` with ``sparse``
        calls it. Shapes: x ``[n_owned, F]``.
        """
        if x is not self.x or not self.sparse_features:
            return x
        return self.nonzeros()

    def nonzeros(self) -> SparseRows:
        """The features' nonzero cells as :class:`~gnndist.sparse_rows.SparseRows`, built once for the run."""
        return self.derived("input_rows", lambda: rows_of(self.x, self.kernel))
