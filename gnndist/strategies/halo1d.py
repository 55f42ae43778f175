"""1D sparsity-aware halo exchange: each rank holds one block row and fetches only its halo rows."""

from __future__ import annotations

import torch
from torch import Tensor

from gnndist.comm import halo_start, halo_wait
from gnndist.kernels import spmm
from gnndist.strategies.base import Strategy


class Halo1D(Strategy):
    """All-to-all of exactly the halo rows; optionally overlapped with interior aggregation.

    Args:
        overlap: start the exchange, aggregate interior edges, wait, aggregate boundary edges
            (default ``True``); otherwise exchange first and aggregate the extended rows at once.
    """

    name = "1d"

    def __init__(self, overlap: bool = True):
        self.overlap = overlap

    def spmm(self, graph, x: Tensor, w_int: Tensor | None, w_bnd: Tensor | None, tag: str) -> Tensor:
        pending = halo_start(x, graph.plan, graph.counter, tag)
        if self.overlap:
            out = spmm(graph.csr_int, x, w_int)  # [n_owned, F] while the halo travels
            x_halo = halo_wait(x, pending)  # [n_halo, F]
            if graph.csr_bnd.nnz:
                out = out + spmm(graph.csr_bnd, x_halo, w_bnd)
            return out
        x_ext = torch.cat([x, halo_wait(x, pending)])  # [n_owned + n_halo, F]
        w = None
        if w_int is not None:
            w = x.new_empty(graph.csr.nnz)
            w[graph.interior], w[~graph.interior] = w_int, w_bnd
        return spmm(graph.csr, x_ext, w)
