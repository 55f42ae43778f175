"""Communication-avoiding SpMM on a ``q x c`` process grid: ``1.5d`` (replication ``c``) and ``2d`` (``c = sqrt(P)``).

Rank ``k = (i, j)`` (``i = k // c``, ``j = k % c``) keeps owning its 1D rows ``R_k``. The
``c`` ranks of block row ``i`` (the ``row`` axis, the replica group) share the rows
``R_i = R_(i,0) + ... + R_(i,c-1)``; column slab ``j`` is every row owned by the ``col``
axis ``{(i', j)}``. Rank ``(i, j)`` multiplies the block ``A[R_i, S_j]``:

1. **expand** (``col`` axis, ``q`` ranks): gather the rows of ``X[S_j]`` its nonzeros touch
   from their owners — sparsity-aware: only those rows, a hub row is sent once per block
   row instead of once per rank that needs it;
2. multiply, giving partial rows of ``R_i`` (only rows with a nonzero in the block);
3. **fold** (``row`` axis, ``c`` ranks): send each partial row to its owner, summed there —
   a sparse reduce-scatter that returns the 1D row layout, so nothing above changes.

Backward is the same three steps reversed through autograd (fold <-> gather are adjoint).
A hub column is thus sent at most ``q`` times instead of ``P - 1``; the price is the fold,
about ``(c - 1) n / P`` rows per rank on a dense graph. ``c = 1`` would be 1D; ``2d`` is
the square grid (``c = q``). Because input and output stay in the 1D layout, no
activation is replicated and every node is counted once by the loss, norms and metrics.

The block is built at load time from the parts the ranks already hold (one exchange of
``(row, col)`` pairs inside the replica group, and of the requested ids along both axes),
so any partition directory serves every layout.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from gnndist.dist.comm import ExchangePlan
from gnndist.errors import UserError
from gnndist.strategies.base import Block, BlockStrategy


def _all_to_all_v(grid, rows: Tensor, counts: Tensor, axis) -> tuple[Tensor, Tensor]:
    """Send ``rows`` (grouped by destination, ``counts`` per axis member) over ``grid``'s ``axis``;
    returns (received, counts received)."""
    if axis.size == 1 or not grid.distributed:
        return rows, counts
    recv_counts = torch.empty_like(counts)
    grid.all_to_all_single(recv_counts, counts, axis=axis)
    out = rows.new_empty((int(recv_counts.sum()),) + tuple(rows.shape[1:]))
    grid.all_to_all_single(out, rows, recv_counts.tolist(), counts.tolist(), axis)
    return out, recv_counts


def _group_by(dest: Tensor, size: int, *values: Tensor) -> tuple[Tensor, ...]:
    """Sort ``values`` by ``dest`` (stable) and count per destination ``[size]``."""
    order = torch.argsort(dest, stable=True)
    counts = torch.bincount(dest, minlength=size)
    return (counts, *(v[order] for v in values))


class Grid15D(BlockStrategy):
    """1.5D: ``P = q * c`` ranks, replication ``c``; expand along ``col`` (``q`` ranks), fold along ``row`` (``c``).

    Args:
        replication: ``c``, at least 2, which must divide the number of ranks (``--replication``;
            :class:`~gnndist.config.DistConfig` validates it).
        overlap: overlap the expand with the interior product (default ``True``).
    """

    name = "1.5d"

    def __init__(self, replication: int, overlap: bool = True):
        super().__init__(overlap)
        self.replication = replication

    @classmethod
    def from_config(cls, dist) -> Grid15D:
        return cls(dist.replication, dist.overlap)

    def grid_shape(self, world: int) -> int:
        """The replication ``c`` for ``world`` ranks (errors name the flag)."""
        if world % self.replication:
            raise UserError(f"--replication {self.replication} must divide the number of ranks ({world})")
        return self.replication

    def describe(self) -> str:
        return f"{self.name}(c={self.replication})"

    def make_block(self, part, grid) -> Block:
        return grid_block(part, grid, self.grid_shape(grid.world_size))


def grid_block(part, grid, c: int) -> Block:
    """Rank ``(i, j)``'s block ``A[R_i, S_j]`` of the ``q x c`` grid, with its expand and fold plans (collective)."""
    axes = grid.axes(c)
    row_ax, col_ax = axes["row"], axes["col"]
    csr = part.csr
    off = torch.as_tensor(np.asarray(part.offsets), dtype=torch.int64, device=csr.device)  # [P + 1]
    lo, n_owned = int(off[grid.rank]), part.n_owned

    def owner(ids: Tensor) -> Tensor:
        return torch.searchsorted(off, ids, right=True) - 1

    # 1. my nonzeros in global (new) ids, sent to the replica whose slab holds the column
    local_col = csr.col.long()
    gcol = local_col + lo  # [nnz]
    halo = local_col >= n_owned  # only these index the halo (which may be empty)
    gcol[halo] = part.halo_gid[local_col[halo] - n_owned].long()
    grow = csr.row.long() + lo  # [nnz]
    counts, grow, gcol = _group_by(owner(gcol) % c, c, grow, gcol)
    pairs, _ = _all_to_all_v(grid, torch.stack([grow, gcol], 1), counts, row_ax)  # [nnz_block, 2]: A[R_i, S_j]
    grow, gcol = pairs[:, 0], pairs[:, 1]
    mine_r = (grow >= lo) & (grow < lo + n_owned)
    mine_c = (gcol >= lo) & (gcol < lo + n_owned)

    # 2. fold: partial rows of other owners (same replica group), grouped by owner
    fold_gid, row_local = torch.unique(grow[~mine_r], return_inverse=True)  # sorted = grouped by owner
    out_row = torch.empty_like(grow)
    out_row[mine_r] = grow[mine_r] - lo
    out_row[~mine_r] = n_owned + row_local
    fold_to = owner(fold_gid) % c  # position on the row axis
    fold_plan = _plan(grid, fold_gid, fold_to, row_ax, lo)

    # 3. expand: gathered columns (owners on my column axis), grouped by owner
    halo_gid, col_local = torch.unique(gcol[~mine_c], return_inverse=True)
    in_col = torch.empty_like(gcol)
    in_col[mine_c] = gcol[mine_c] - lo
    in_col[~mine_c] = n_owned + col_local
    expand_plan = _plan(grid, halo_gid, owner(halo_gid) // c, col_ax, lo)
    return Block.from_local(n_owned, out_row, in_col, len(fold_gid), len(halo_gid), expand_plan, fold_plan)


def _plan(grid, ids: Tensor, dest: Tensor, axis, lo: int) -> ExchangePlan:
    """Plan for rows ``ids`` (sorted global ids) that live on axis members ``dest``.

    This rank receives (gather) or sends (fold) them in this order; each owner learns
    which of its rows are involved by one exchange of the ids.
    """
    recv_counts = torch.bincount(dest, minlength=axis.size)  # [axis size], ids already grouped
    asked, send_counts = _all_to_all_v(grid, ids, recv_counts, axis)
    return ExchangePlan(asked - lo, send_counts.tolist(), recv_counts.tolist(), grid, axis)


class Grid2D(BlockStrategy):
    """2D: ``P = s * s`` ranks on a square grid; block ``(i, j)`` of ``A`` on rank ``(i, j)``.

    The input rows each block touches travel along the grid's ``col`` axis and the partial
    products are reduced along its ``row`` axis, back to the 1D rows: the square case of
    :class:`Grid15D` (``c = s``), built by the same :func:`grid_block`.

    Args:
        overlap: overlap the expand with the interior product (default ``True``).
        replication: the side ``s``, where it is known before the world is (``auto``'s candidates); ``None``
            (``--strategy 2d``): the world decides it when the layout is built.
    """

    name = "2d"

    def __init__(self, overlap: bool = True, replication: int | None = None):
        super().__init__(overlap)
        self.replication = replication

    @classmethod
    def from_config(cls, dist) -> Grid2D:
        return cls(dist.overlap)

    def grid_shape(self, world: int) -> int:
        """The side ``s = sqrt(world)`` of the square grid, which is this layout's replication."""
        s = math.isqrt(world)
        if s * s != world or world < 4:
            raise UserError(f"--strategy 2d needs a square number of ranks >= 4, got {world}")
        return s

    def make_block(self, part, grid) -> Block:
        self.replication = self.grid_shape(grid.world_size)  # the world decides it, once the layout is built
        return grid_block(part, grid, self.replication)

    def describe(self) -> str:
        return f"2d({self.replication}x{self.replication})" if self.replication else "2d"
