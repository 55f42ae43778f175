"""``DistGraph``: one rank's rows of the graph, its local CSR and halo plans, and aggregation on them.

Local ids: ``[0, n_owned)`` are this rank's nodes, ``[n_owned, n_owned + n_halo)`` the halo,
grouped by owner rank. The local CSR has the owned rows only. For overlap, it is split
into an *interior* CSR (sources owned) and a *boundary* CSR (sources in the halo, columns
shifted by ``-n_owned``): the exchange runs while the interior edges are aggregated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gnndist.comm import ByteCounter, HaloPlan, halo_exchange
from gnndist.errors import UserError
from gnndist.grid import ProcessGrid
from gnndist.kernels import CSR
from gnndist.nn.dropout import apply_dropout, cell_bits, hash_bits, node_keys
from gnndist.strategies import Strategy, get_strategy


def _split(csr: CSR, n_owned: int) -> tuple[CSR, CSR, Tensor]:
    """Interior (col < n_owned) and boundary (col >= n_owned, shifted) CSRs, and the interior edge mask."""
    interior = csr.col < n_owned  # [nnz]
    row = csr.row.long()
    counts_int = torch.bincount(row[interior], minlength=csr.n_rows)
    counts_bnd = torch.bincount(row[~interior], minlength=csr.n_rows)

    def offsets(c: Tensor) -> Tensor:
        return torch.cat([c.new_zeros(1), torch.cumsum(c, 0)]).to(csr.col.dtype)

    csr_int = CSR(offsets(counts_int), csr.col[interior], n_owned)
    csr_bnd = CSR(offsets(counts_bnd), csr.col[~interior] - n_owned, csr.num_cols - n_owned)
    return csr_int, csr_bnd, interior


class DistGraph:
    """One rank's part of a partitioned graph; layers call :meth:`spmm`, :meth:`halo`, :meth:`extend`.

    Args:
        arrays: the part's arrays (see :mod:`gnndist.partition`), as numpy.
        meta: the partition's META.json.
        grid: the process grid.
        counter: byte counter every exchange reports to (a fresh one by default).
        strategy: distributed aggregation strategy (default: 1D halo exchange with overlap).
    """

    def __init__(self, arrays: dict, meta: dict, grid: ProcessGrid | None = None,
                 counter: ByteCounter | None = None, strategy: Strategy | None = None):
        self.grid = grid or ProcessGrid()
        self.meta = meta
        self.counter = counter if counter is not None else ByteCounter()
        self.strategy = strategy or get_strategy("1d")
        dev = self.grid.device
        t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        self.n_owned = int(t["rowptr"].numel() - 1)
        self.n_halo = int(t["halo_gid"].numel())
        self.csr = CSR(t["rowptr"].to(dev), t["col"].to(dev), self.n_owned + self.n_halo)
        self.csr_int, self.csr_bnd, self.interior = _split(self.csr, self.n_owned)
        self.plan = HaloPlan(t["send_idx"].to(dev), t["send_counts"].tolist(), t["recv_counts"].tolist())
        self.orig_id = t["orig_id"].to(dev)  # [n_owned + n_halo] dataset ids
        self.degree = t["degree"].to(dev)  # [n_owned + n_halo] global degree, no self-loops
        self.x = t["x"].to(dev)  # [n_owned, F]
        self.y = t["y"].to(dev)  # [n_owned] (or [n_owned, T] multi-label)
        self.train_mask = t["train_mask"].to(dev)
        self.val_mask = t["val_mask"].to(dev)
        self.test_mask = t["test_mask"].to(dev)
        self.num_train = int(meta.get("num_train", 0))
        self.num_classes = int(meta["classes"])
        self.num_nodes = int(meta["N"])
        self.seed = 0
        self.epoch = 0
        self._gcn: tuple[Tensor, Tensor, Tensor] | None = None
        self._x_nz: tuple | None = None

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

    # ------------------------------------------------------------------ exchange
    def halo(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Halo rows of ``x`` from their owners (differentiable).

        Shapes:
            x ``[n_owned, F]`` -> ``[n_halo, F]``
        """
        return halo_exchange(x, self.plan, self.counter, tag)

    def extend(self, x: Tensor, tag: str = "halo") -> Tensor:
        """Owned rows followed by halo rows: the input a local-graph layer needs.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned + n_halo, F]``
        """
        return torch.cat([x, self.halo(x, tag)], dim=0)

    # ------------------------------------------------------------------ aggregation
    def gcn_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """Symmetric GCN normalisation with self-loops from global degrees (cached).

        Returns interior edge weights ``[nnz_int]``, boundary edge weights ``[nnz_bnd]`` and
        self-loop weights ``[n_owned]``: ``w_ij = 1 / sqrt((d_i + 1)(d_j + 1))``.
        """
        if self._gcn is None:
            dinv = (self.degree.double() + 1.0).rsqrt()  # [n_owned + n_halo]
            w = (dinv[self.csr.row.long()] * dinv[self.csr.col.long()]).float()  # [nnz]
            self._gcn = (w[self.interior], w[~self.interior], (dinv[: self.n_owned] ** 2).float())
        return self._gcn

    def spmm(self, x: Tensor, weight: str | None = None, reduce: str = "sum", tag: str = "halo") -> Tensor:
        """Aggregate neighbours of every owned row: ``out[i] = reduce_j w_ij x[j]``.

        Args:
            x: owned rows of the node features.
            weight: ``None`` (all ones) or ``"gcn"`` (symmetric normalisation with self-loops).
            reduce: ``"sum"`` or ``"mean"`` (over the row's full neighbourhood).
            tag: name the exchange's bytes are counted under.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned, F]``
        """
        w_int = w_bnd = w_self = None
        if weight == "gcn":
            w_int, w_bnd, w_self = self.gcn_weights()
        elif weight is not None:
            raise ValueError(f"unknown weight {weight!r}")
        out = self.strategy.spmm(self, x, w_int, w_bnd, tag)  # [n_owned, F]
        if w_self is not None:
            out = out + w_self[:, None] * x
        if reduce == "mean":
            out = out / self.csr.in_degree().clamp(min=1).to(out.dtype)[:, None]
        elif reduce != "sum":
            raise ValueError(f"unknown reduce {reduce!r}")
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
        drop = hash_bits(ids, x.shape[1], self.seed, self.epoch, key) < int(p * 2**31)  # [n_owned, F]
        return apply_dropout(x, drop, p)

    def _x_nonzero(self) -> tuple[Tensor, Tensor, Tensor] | None:
        """Cached nonzero pattern of the input features when under half of them are nonzero."""
        if self._x_nz is None or self._x_nz[0] is not self.x:
            nz = None
            if self.x.numel() and (self.x != 0).sum().item() < self.x.numel() // 2:
                rows, cols = self.x.nonzero(as_tuple=True)
                nz = (rows, cols, self.x[rows, cols])
            self._x_nz = (self.x, nz)
        return self._x_nz[1]
