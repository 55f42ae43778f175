"""``DistGraph``: one rank's rows of the graph, and aggregation on them through its strategy.

``DistGraph`` holds what every layout shares: the rows this rank owns (features, labels,
masks, dataset ids, global degrees) and the part as the partition stored it (its rows of
``A`` in local ids, the halo ids and the 1D send plans), from which each strategy builds
its own layout. Local ids: ``[0, n_owned)`` are this rank's nodes, ``[n_owned, n_owned +
n_halo)`` the 1D halo, grouped by owner rank.

Layers aggregate with :meth:`DistGraph.spmm` (linear aggregation: the run's strategy,
per layer under ``auto``) or take the 1D halo with :meth:`DistGraph.extend` for per-edge
messages (attention, custom messages), which always run on the ``1d`` layout.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gnndist.comm import ByteCounter, gather
from gnndist.dropout import apply_dropout, cell_bits, hash_dropout, node_keys
from gnndist.errors import UserError
from gnndist.grid import ProcessGrid
from gnndist.kernels import CSR
from gnndist.strategies import Halo1D, Strategy, get_strategy
from gnndist.timing import PhaseTimer, bracket

log = logging.getLogger("gnndist")
SPLIT_ARRAYS = ("train_masks", "val_masks", "test_masks")  # a partition's stored splits, [n_owned, K] bool each


class DistGraph:
    """One rank's part of a partitioned graph; layers call :meth:`spmm`, :meth:`halo`, :meth:`extend`.

    Args:
        arrays: the part's arrays (see :mod:`gnndist.partition`), as numpy.
        meta: the partition's META.json.
        grid: the process grid.
        counter: byte counter every exchange reports to (a fresh one by default).
        strategy: aggregation strategy, a name (``1d``, ``1.5d``, ``2d``, ``auto``) or an
            unprepared :class:`~gnndist.strategies.Strategy` (default ``1d``); prepared here,
            on every rank at once.
        comm_dtype: dtype the exchanged rows travel in, ``"fp32"`` (default: their own) or
            ``"bf16"`` (half the bytes; cast back on receipt, so arithmetic stays fp32).
    """

    def __init__(self, arrays: dict, meta: dict, grid: ProcessGrid | None = None,
                 counter: ByteCounter | None = None, strategy: Strategy | str | None = None,
                 comm_dtype: str = "fp32"):
        self.grid = grid or ProcessGrid()
        self.comm_dtype = {"fp32": None, "bf16": torch.bfloat16}[comm_dtype]  # None: rows travel as they are
        self.meta = meta
        self.counter = counter if counter is not None else ByteCounter()
        self.timer = PhaseTimer()  # the epoch's time per phase; the exchanges report their waits to it
        self.counter.timer = self.timer
        dev = self.grid.device
        t = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in arrays.items()}
        rows = ("x", "y", "train_mask", "val_mask", "test_mask") + SPLIT_ARRAYS
        self.part = {k: v for k, v in t.items() if k not in rows}  # the stored structure; strategies build on it
        self.n_owned = int(t["rowptr"].numel() - 1)
        self.n_halo = int(t["halo_gid"].numel())
        self.csr = CSR(t["rowptr"], t["col"], self.n_owned + self.n_halo)  # [n_owned, n_owned + n_halo]
        self.halo_gid = t["halo_gid"]  # [n_halo] global (new) ids of the halo
        self.orig_id = t["orig_id"]  # [n_owned + n_halo] dataset ids
        self.degree = t["degree"]  # [n_owned + n_halo] global degree, no self-loops
        self.edge_attr = t.get("edge_attr")  # [nnz, *] features of the local edges in CSR order, or None
        self.x = t["x"]  # [n_owned, F]
        self.y = t["y"]  # [n_owned] (or [n_owned, T] multi-label)
        self.train_mask = t["train_mask"]
        self.val_mask = t["val_mask"]
        self.test_mask = t["test_mask"]
        self.num_train = int(meta.get("num_train", 0))
        self.splits = {k: t[k] for k in SPLIT_ARRAYS if k in t}  # [n_owned, K] each: every split the partition holds
        self.num_classes = int(meta["classes"])
        self.num_nodes = int(meta["N"])
        self.seed = 0
        self.epoch = 0
        self._x_nz: tuple | None = None
        self._dinv: Tensor | None = None
        self._said: set[str] = set()
        self.calls: dict[str, tuple[int, int]] = {}  # tag -> (width, SpMMs since reset_counters)
        self.forward_only: dict[str, int] = {}  # tag -> those of the SpMMs whose backward never runs
        self.recomputing = False  # a checkpointed block is being recomputed (its SpMMs have no backward)
        s = get_strategy(strategy or "1d") if isinstance(strategy, str) or strategy is None else strategy
        s.prepare(self)
        self.strategy = s
        self._halo1d = s if isinstance(s, Halo1D) else None

    @classmethod
    def load(cls, root: str | Path, grid: ProcessGrid, **kw) -> DistGraph:
        """Load this rank's part; the world size must equal the number of parts."""
        from gnndist.partition import read_meta, read_part

        meta = read_meta(root)
        if meta["parts"] != grid.world_size:
            raise UserError(
                f"{root} has {meta['parts']} parts but the world has {grid.world_size} ranks: "
                f"use --nproc {meta['parts']} or re-partition with --parts {grid.world_size}"
            )
        return cls(read_part(root, grid.rank, meta), meta, grid, **kw)

    def use_split(self, k: int) -> None:
        """Train, validate and test on split ``k`` of the partition's splits (shipped, or seeded random ones).

        Collective: the global training count is summed over ranks.
        """
        if not self.splits:
            raise UserError(f"{self.meta.get('dataset')}: the partition holds no splits to choose from")
        train, val, test = (self.splits[name][:, k] for name in SPLIT_ARRAYS)  # [n_owned] each
        self.train_mask, self.val_mask, self.test_mask = train, val, test
        count = torch.tensor([float(train.sum())], dtype=torch.float64, device=self.grid.device)
        self.num_train = int(self.grid.all_reduce_(count).item())

    # ------------------------------------------------------------------ exchange (1d layout)
    @property
    def layout1d(self) -> Halo1D:
        """The partition's own 1D layout (per-edge layers use it whatever the run's strategy)."""
        if self._halo1d is None:
            self._halo1d = Halo1D()
            self._halo1d.prepare(self)
        return self._halo1d

    def halo(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Halo rows of ``x`` from their owners (differentiable), on the 1D layout.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_halo, F]``
        """
        if self.strategy.name != "1d":
            self.say_once(f"edge:{tag.split('/')[0]}", f"{tag.split('/')[0]}: per-edge messages run on the 1d layout")
        return gather(x, self.layout1d.block.expand, self.counter, tag)

    def extend(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Owned rows followed by halo rows: the input a local-graph layer needs.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned + n_halo, F]``
        """
        return torch.cat([x, self.halo(x, tag)], dim=0)

    def say_once(self, key: str, msg: str) -> None:
        """Log ``msg`` once per run (rank 0)."""
        if key not in self._said:
            self._said.add(key)
            if self.grid.is_main:
                log.info(msg)

    # ------------------------------------------------------------------ aggregation
    def gcn_dinv(self) -> Tensor:
        """``(d_i + 1)^(-1/2)`` of every owned row: GCN's symmetric normalisation with self-loops, global degrees. ``[n_owned]``."""
        if self._dinv is None:
            self._dinv = (self.degree[: self.n_owned].double() + 1.0).rsqrt().float()
        return self._dinv

    def spmm(self, x: Tensor, weight: str | None = None, reduce: str = "sum", tag: str = "halo") -> Tensor:
        """Aggregate neighbours of every owned row: ``out[i] = reduce_j w_ij x[j]``, with the run's strategy.

        Args:
            x: owned rows of the node features.
            weight: ``None`` (all ones) or ``"gcn"`` (``D^-1/2 (A + I) D^-1/2``: the rows are
                scaled by ``D^-1/2`` on both sides of the sum, so strategies only sum).
            reduce: ``"sum"`` or ``"mean"`` (over the row's full neighbourhood).
            tag: name the exchanges' bytes are counted under (the layer), and under which
                ``auto`` remembers its choice.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned, F]``
        """
        width, n = self.calls.get(tag, (x.shape[1], 0))
        self.calls[tag] = (x.shape[1], n + 1)
        if self.recomputing or not (torch.is_grad_enabled() and x.requires_grad):
            self.forward_only[tag] = self.forward_only.get(tag, 0) + 1
        if weight == "gcn":
            dinv = self.gcn_dinv().to(x.dtype)[:, None]  # [n_owned, 1]
            y = dinv * x  # D^-1/2 (A + I) D^-1/2 x = D^-1/2 (A y + y): three passes over [n, F], not four
            # in place on the aggregate (a fresh tensor no backward needs): no further [n, F] buffers
            return self._aggregate(y, tag).add_(y).mul_(dinv)
        if weight is not None:
            raise ValueError(f"unknown weight {weight!r}")
        out = self._aggregate(x, tag)  # [n_owned, F]
        if reduce == "mean":
            out = out / self.degree[: self.n_owned].clamp(min=1).to(out.dtype)[:, None]
        elif reduce != "sum":
            raise ValueError(f"unknown reduce {reduce!r}")
        return out

    def _aggregate(self, x: Tensor, tag: str) -> Tensor:
        """The strategy's SpMM, timed as ``aggregation`` forward and backward (its exchange waits as ``comm``)."""
        return bracket(self.timer, "aggregation", lambda h: self.strategy.spmm(h, tag), x)

    def strategy_of(self, tag: str) -> Strategy:
        """The strategy that aggregates layer ``tag`` (under ``auto``: its choice for that layer)."""
        pick = getattr(self.strategy, "strategy_for", None)
        return (pick(tag) if pick else None) or self.strategy

    def reset_counters(self) -> None:
        """Forget the bytes and SpMM calls counted so far (once per epoch)."""
        self.counter.reset()
        self.calls = {tag: (w, 0) for tag, (w, _) in self.calls.items()}
        self.forward_only = {}

    def predicted_bytes(self) -> dict[str, dict[str, int]]:
        """This rank's bytes per layer as its strategies predict them for the SpMMs since :meth:`reset_counters`."""
        out = {}
        for tag, (width, n) in self.calls.items():
            b = self.strategy_of(tag).bytes(width, self.comm_dtype.itemsize if self.comm_dtype else 4)
            m = n - self.forward_only.get(tag, 0)  # SpMMs with a backward exchange
            out[tag] = {k: v * (m if k.startswith("bwd") else n) for k, v in b.items()}
        return out

    # ------------------------------------------------------------------ randomness
    def dropout(self, x: Tensor, p: float, key: int, training: bool = True) -> Tensor:
        """Dropout whose mask depends on (seed, epoch, key, dataset node id): the same for every P.

        On the input features (``x is graph.x``) with mostly zero entries, the mask is only
        evaluated at the cached nonzeros: the result is the same, the cost is ``O(nnz)``.

        Shapes:
            x ``[n_owned, F]``
        """
        if not training or p == 0.0:
            return x
        ids = self.orig_id[: x.shape[0]]
        if x is self.x and self._x_nonzero() is not None:
            rows, cols, vals = self._x_nonzero()
            keys = node_keys(ids, self.seed, self.epoch, key)  # [n_owned]
            drop = cell_bits(keys[rows], cols) < int(p * 2**31)  # [nnz]: the dense mask's cells
            out = torch.zeros_like(x)
            out[rows, cols] = apply_dropout(vals, drop, p)
            return out
        return hash_dropout(x, node_keys(ids, self.seed, self.epoch, key), p)  # fused on CUDA

    def _x_nonzero(self) -> tuple[Tensor, Tensor, Tensor] | None:
        """Cached nonzero pattern of the input features when under half of them are nonzero."""
        if self._x_nz is None or self._x_nz[0] is not self.x:
            nz = None
            if self.x.numel() and (self.x != 0).sum().item() < self.x.numel() // 2:
                rows, cols = self.x.nonzero(as_tuple=True)
                nz = (rows, cols, self.x[rows, cols])
            self._x_nz = (self.x, nz)
        return self._x_nz[1]
