"""1D sparsity-aware halo exchange: each rank multiplies the rows it owns and gathers only its halo rows."""

from __future__ import annotations

from gnndist.comm import ExchangePlan
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

    def __init__(self, overlap: bool = True, replication: int | None = None):
        super().__init__(overlap)
        self.replication = 1

    def build(self, graph) -> Block:
        part = graph.part
        expand = ExchangePlan(part["send_idx"], part["send_counts"].tolist(), part["recv_counts"].tolist(), graph.grid)
        csr = graph.csr
        return Block.from_local(graph.n_owned, csr.row.long(), csr.col.long(), 0, graph.n_halo, expand, None)
