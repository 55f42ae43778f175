"""The interface every distributed aggregation strategy implements."""

from __future__ import annotations

from torch import Tensor


class Strategy:
    """Computes ``out[i] = sum_j w_ij x[j]`` over each owned row's neighbourhood.

    Args of :meth:`spmm`:
        graph: the rank's :class:`~gnndist.graph.DistGraph`.
        x: owned rows ``[n_owned, F]``.
        w_int, w_bnd: edge weights of the interior / boundary CSR, or ``None`` for ones.
        tag: name the communicated bytes are counted under.
    """

    name: str = ""

    def spmm(self, graph, x: Tensor, w_int: Tensor | None, w_bnd: Tensor | None, tag: str) -> Tensor:
        raise NotImplementedError
