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
        symmetric: the part's rows are of a symmetric ``A`` (default ``True``: the union graph), so the
            interior block is its own transpose; ``False`` for one relation of a typed graph
            (:meth:`DistGraph.relation <gnndist.graph.DistGraph.relation>`).
    """

    name = "1d"
    replication = 1

    def __init__(self, overlap: bool = True, symmetric: bool = True):
        super().__init__(overlap)
        self.symmetric = symmetric

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
        interior = CSR(interior.rowptr, interior.col, interior.num_cols, symmetric=self.symmetric)
        return Block(part.n_owned, interior, boundary, expand, None)
