"""The interface every distributed aggregation strategy implements, and the block layout they share.

Every strategy takes and returns the 1D row layout (``[n_owned, F]``: the rows a rank
owns), so layers, losses and norms above it never change. In between, a strategy owns
its layout: which nonzeros of ``A`` this rank multiplies (its *block*), the input rows it
gathers from their owners (*expand*) and the partial output rows it folds into their
owners (*fold*). The three layouts differ only in how they assign nonzeros to ranks:

* ``1d``: rank ``k`` multiplies the rows it owns; expand = the halo exchange; no fold
  (:mod:`.halo1d`).
* ``1.5d`` / ``2d``: ``P = q * c`` ranks on a ``q x c`` grid, see :mod:`.grid_spmm`.

``auto`` (:mod:`.auto`) is no layout of its own: it picks one of these per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnndist.cost import RankLoad
from gnndist.dist.comm import ByteCounter, ExchangePlan, PendingFold, PendingGather, fold, gather
from gnndist.kernels import CSR, KernelSettings, spmm
from gnndist.kernels.csr import index_dtype
from gnndist.kernels.spmm import transposed_product
from gnndist.strategies.structure import Structure

if TYPE_CHECKING:
    from gnndist.dist.grid import ProcessGrid


@dataclass
class Block:
    """One rank's share of ``A`` with its two exchanges.

    Output rows are ``[0, n_owned)`` (this rank's) then ``[n_owned, n_owned + n_fold)``
    (partial rows of other ranks, grouped by owner); input columns are ``[0, n_owned)``
    (this rank's rows of ``X``) then ``[n_owned, n_owned + n_halo)`` (gathered, grouped by owner).

    Attributes:
        csr_int: nonzeros with an owned column ``[n_owned + n_fold, n_owned]``.
        csr_bnd: nonzeros with a gathered column, shifted ``[n_owned + n_fold, n_halo]``.
        expand: gather plan of the input rows (on the column axis).
        fold: fold plan of the partial rows (on the row axis), or ``None`` in 1D.
    """

    n_owned: int
    csr_int: CSR
    csr_bnd: CSR
    expand: ExchangePlan
    fold: ExchangePlan | None = None
    _full: CSR | None = field(default=None, repr=False)
    _split: tuple[CSR, CSR] | None = field(default=None, repr=False)

    @property
    def n_fold(self) -> int:
        return self.fold.n_recv if self.fold is not None else 0

    @property
    def nnz(self) -> int:
        return self.csr_int.nnz + self.csr_bnd.nnz

    @classmethod
    def from_local(cls, n_owned: int, row: Tensor, col: Tensor, n_fold: int, n_halo: int,
                   expand: ExchangePlan, fold: ExchangePlan | None) -> Block:
        """Split local nonzeros ``(row, col)`` (output / input local ids) into interior and boundary CSRs."""
        interior = col < n_owned  # [nnz]
        n_out = n_owned + n_fold
        dt = index_dtype(col.numel(), n_out, n_owned + n_halo)  # the CSRs keep int32 where it fits
        csr_int = CSR.from_coo(row[interior], col[interior].to(dt), n_out, n_owned)
        csr_bnd = CSR.from_coo(row[~interior], (col[~interior] - n_owned).to(dt), n_out, n_halo)
        return cls(n_owned, csr_int, csr_bnd, expand, fold)

    def boundary_split(self) -> tuple[CSR, CSR]:
        """``csr_bnd``'s own rows ``[n_owned, n_halo]`` and partial rows ``[n_fold, n_halo]`` (cached)."""
        if self._split is None:
            self._split = (_row_slice(self.csr_bnd, 0, self.n_owned),
                           _row_slice(self.csr_bnd, self.n_owned, self.csr_bnd.n_rows))
        return self._split

    def full_csr(self) -> CSR:
        """All nonzeros at once ``[n_owned + n_fold, n_owned + n_halo]`` (for the non-overlapped path; cached)."""
        if self._full is None:
            i, b = self.csr_int, self.csr_bnd
            row = torch.cat([i.row.long(), b.row.long()])
            col = torch.cat([i.col.long(), b.col.long() + self.n_owned])
            self._full = CSR.from_coo(row, col, i.n_rows, self.n_owned + b.num_cols)
        return self._full

    def load(self) -> RankLoad:
        """This rank's counts for the cost model (rows, messages, nonzeros)."""
        fs = self.fold.n_recv if self.fold is not None else 0
        fr = self.fold.n_send if self.fold is not None else 0
        msgs = self.expand.peers + (self.fold.peers if self.fold is not None else 0)
        return RankLoad(self.expand.n_send, self.expand.n_recv, fs, fr, msgs, self.nnz, self.n_owned,
                        1 + (self.fold is not None))

    def pairs(self, world: int) -> np.ndarray:
        """``[2, world]``: the rows this rank receives from every rank in the expand and sends to every rank in
        the fold (its row of :attr:`gnndist.partition.layouts.LayoutCounts.pairs`), from its plans."""
        out = np.zeros((2, world), dtype=np.int64)
        for k, plan, counts in ((0, self.expand, self.expand.recv_counts),
                                (1, self.fold, self.fold.recv_counts if self.fold is not None else None)):
            if counts is not None:  # a fold sends what its plan's gather would receive
                ranks = plan.axis.ranks if hasattr(plan.axis, "ranks") else range(len(counts))
                out[k, list(ranks)] = counts
        return out


def _row_slice(csr: CSR, a: int, b: int) -> CSR:
    """Rows ``[a, b)`` of ``csr`` (views of its arrays)."""
    rowptr = csr.rowptr[a : b + 1]
    lo, hi = int(rowptr[0]), int(rowptr[-1])
    return CSR(rowptr - lo, csr.col[lo:hi], csr.num_cols)


class Strategy:
    """Computes ``out[i] = sum_j A_ij x[j]`` for every owned row ``i``, with whatever communication it needs.

    Lifecycle: made from the config (:meth:`from_config`, or by name through
    :func:`gnndist.strategies.strategy_from_config`), then :meth:`build` on every rank at once (it
    may communicate), then :meth:`spmm` per layer. Forward and backward go through
    autograd: the exchanges are autograd functions, so no layer needs a distributed
    backward of its own. Every method a caller uses is declared here.

    Attributes:
        name: the registry name (``--strategy``).
        replication: ``c`` of the layout (1 for ``1d``); ``None`` until :meth:`build` where the
            world size decides it (``2d``), and for ``auto`` (per layer: see :meth:`layout_for`).
    """

    name: str = ""
    replication: int | None = None

    @classmethod
    def from_config(cls, dist) -> Strategy:
        """The strategy of ``--strategy`` with the options of ``dist`` (a :class:`~gnndist.config.DistConfig`) it
        uses."""
        raise NotImplementedError

    def grid_shape(self, world: int) -> int:
        """The replication this layout uses on ``world`` ranks; a one-line ``UserError`` if it cannot."""
        return 1

    def build(self, part: Structure, grid: ProcessGrid, counter: ByteCounter, kernel: KernelSettings | None = None,
              wire: torch.dtype | None = None) -> None:
        """Build this rank's layout from the part's structure (collective: every rank calls it).

        Args:
            part: the rank's :class:`Structure`.
            grid: the process grid.
            counter: the byte counter every exchange reports to.
            kernel: the SpMM kernels (:class:`~gnndist.kernels.KernelSettings`; default: the dispatcher's choice).
            wire: dtype the exchanged rows travel in (``None``: their own).
        """
        raise NotImplementedError

    def spmm(self, x: Tensor, tag: str) -> Tensor:
        """Sum over every owned row's neighbours; bytes are counted under ``tag``.

        Shapes:
            x ``[n_owned, F]`` -> ``[n_owned, F]``
        """
        raise NotImplementedError

    def layout_for(self, tag: str) -> BlockStrategy:
        """The layout that aggregates layer ``tag`` (``auto``: its choice for that layer; others: themselves)."""
        raise NotImplementedError

    def halo_layout(self) -> BlockStrategy | None:
        """This strategy itself where it is the partition's 1D layout, whose halo exchange per-edge layers use
        (``1d``); ``None`` where those layers need that layout built beside it (every other strategy)."""
        return None

    def after_first_step(self) -> None:
        """Called once every layer has run one step (``auto`` frees the layouts no layer chose)."""

    def choices(self) -> dict[str, dict]:
        """Per layer, the candidates considered and their modelled time and bytes (``auto``; others: none)."""
        return {}

    def describe(self) -> str:
        return self.name


class BlockStrategy(Strategy):
    """A strategy whose layout is one :class:`Block` per rank (all but ``auto``).

    Forward: start the expand, multiply the interior nonzeros while it travels, wait,
    finish the partial rows of other owners and start their fold, finish the own rows
    while it travels, wait and add.

    Args:
        overlap: overlap the expand with the interior product (default ``True``); otherwise
            gather first and multiply once.
    """

    def __init__(self, overlap: bool = True):
        self.overlap = overlap
        self.block: Block | None = None
        self.counter: ByteCounter | None = None
        self.kernel = KernelSettings()

    @property
    def built(self) -> bool:
        return self.block is not None

    def build(self, part: Structure, grid: ProcessGrid, counter: ByteCounter, kernel: KernelSettings | None = None,
              wire: torch.dtype | None = None) -> None:
        self.counter, self.kernel = counter, kernel or KernelSettings()
        self.block = self.make_block(part, grid)
        for plan in (self.block.expand, self.block.fold):  # rows travel in the run's communication dtype
            if plan is not None:
                plan.wire = wire

    def make_block(self, part: Structure, grid: ProcessGrid) -> Block:
        """This rank's :class:`Block` of ``A`` and its exchange plans (collective)."""
        raise NotImplementedError

    def layout_for(self, tag: str) -> BlockStrategy:
        return self

    def load(self) -> RankLoad:
        """This rank's rows, messages and nonzeros of one SpMM (for the cost model)."""
        return self.block.load()

    def pairs(self, world: int) -> np.ndarray:
        """``[2, world]``: this rank's rows from every rank in the expand and to every rank in the fold
        (:meth:`Block.pairs`)."""
        return self.block.pairs(world)

    def bytes(self, width: int, elem: int = 4) -> dict[str, int]:
        """Predicted bytes of one SpMM of ``width`` on this rank: ``fwd_sent``, ``fwd_received``, ``bwd_*``."""
        return self.load().bytes(width, elem)

    def spmm(self, x: Tensor, tag: str) -> Tensor:
        b, k = self.block, {"impl": self.kernel.impl, "tune": self.kernel.tune}
        if not self.overlap:
            halo = gather(x, b.expand, self.counter, tag)  # [n_halo, F]
            out = spmm(b.full_csr(), torch.cat([x, halo]), **k)  # [n_owned + n_fold, F]
            if b.fold is None:
                return out
            return out[: b.n_owned] + fold(out[b.n_owned :], b.fold, b.n_owned, self.counter, tag)
        return _Overlapped.apply(x, self, tag)

    def _forward(self, x: Tensor, tag: str) -> Tensor:
        """The overlapped product (no autograd; :class:`_Overlapped`'s forward)."""
        b, k = self.block, {"impl": self.kernel.impl, "tune": self.kernel.tune}
        pending = PendingGather(x, b.expand, self.counter, tag)
        out = spmm(b.csr_int, x, **k)  # [n_owned + n_fold, F] while the halo travels
        halo = pending.wait()  # [n_halo, F]
        if b.fold is None:
            return out + spmm(b.csr_bnd, halo, **k)
        bnd_own, bnd_fold = b.boundary_split()
        partial = out[b.n_owned :] + spmm(bnd_fold, halo, **k)  # [n_fold, F]: other owners' rows, complete
        pending_fold = PendingFold(partial, b.fold, b.n_owned, self.counter, tag)
        own = out[: b.n_owned] + spmm(bnd_own, halo, **k)  # [n_owned, F] while the partial rows travel
        return own + pending_fold.wait()

    def _backward(self, grad: Tensor, tag: str) -> Tensor:
        """``A^T grad`` for :meth:`_forward`, its exchanges overlapped as the forward's: the partial rows' gradients
        travel (the fold's adjoint) while the own boundary rows' product runs, and the halo's gradients travel home
        (the gather's adjoint) while the interior's runs. The same products and sums as autograd through the forward's
        operations gives (each gradient a sum of two terms, in either order the same), so bit for bit its numbers;
        autograd ran the two exchanges blocking, one after the other."""
        b, k = self.block, {"impl": self.kernel.impl, "tune": self.kernel.tune}
        grad = grad.contiguous()
        if b.fold is None:
            g_halo = transposed_product(b.csr_bnd, grad, None, "sum", **k)  # [n_halo, F]
            home = PendingFold(g_halo, b.expand, b.n_owned, self.counter, tag, "bwd")
            return transposed_product(b.csr_int, grad, None, "sum", **k) + home.wait()
        bnd_own, bnd_fold = b.boundary_split()
        pending = PendingGather(grad, b.fold, self.counter, tag, "bwd")  # the owners' gradients of the partial rows
        g_own = transposed_product(bnd_own, grad, None, "sum", **k)  # [n_halo, F] while they travel
        g_partial = pending.wait()  # [n_fold, F]
        g_halo = g_own + transposed_product(bnd_fold, g_partial, None, "sum", **k)
        home = PendingFold(g_halo, b.expand, b.n_owned, self.counter, tag, "bwd")
        g_x = transposed_product(b.csr_int, torch.cat([grad, g_partial]), None, "sum", **k)  # while they travel
        return g_x + home.wait()


class _Overlapped(torch.autograd.Function):
    """A :class:`BlockStrategy`'s overlapped SpMM: exchanges in flight while the products run, both ways."""

    @staticmethod
    def forward(ctx, x: Tensor, strategy: BlockStrategy, tag: str) -> Tensor:
        ctx.strategy, ctx.tag = strategy, tag
        return strategy._forward(x, tag)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return ctx.strategy._backward(grad, ctx.tag), None, None
