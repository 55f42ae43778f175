"""1D sparsity-aware halo exchange: each rank multiplies the rows it owns and gathers only its halo rows."""

from __future__ import annotations

from gnndist.dist.comm import ExchangePlan
from gnndist.kernels import CSR
from gnndist.strategies.base import Block, BlockStrategy


class Halo1D(BlockStrategy):
    """All-to-all of exactly the halo rows (the partition's send plans); optionally overlapped.

    The layout is the partition's own: the rank's block is its rows of ``A``, the expand is
    the halo exchange stored on disk, there is no fold. Works for every layer, including
    per-edge messages (``graph.extend`` uses this layout).

    Args:
        overlap: start the exchange, aggregate interior edges, wait, aggregate boundary edges
            (default ``True``); otherwise exchange first and aggregate the extended rows at once.
    """

    name = "1d"
    replication = 1

    @classmethod
    def from_config(cls, dist) -> Halo1D:
        return cls(dist.overlap)

    def halo_layout(self) -> Halo1D:
        return self

    def make_block(self, part, grid) -> Block:
        expand = ExchangePlan(part.send_idx, part.send_counts, part.recv_counts, grid)
        interior, boundary = part.split()
        # the owned rows' own columns: a diagonal block of the symmetrised A, its own transpose (the backward
        # multiplies by it again); the boundary's transpose is built on the first backward (CSR.transposed)
        interior = CSR(interior.rowptr, interior.col, interior.num_cols, symmetric=True)
        return Block(part.n_owned, interior, boundary, expand, None)
