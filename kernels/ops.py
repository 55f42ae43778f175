"""The public kernels: check shapes once, then hand over to the dispatcher.

Every function takes ``impl=`` (``"triton"``, ``"sparse"``, ``"reference"``) to force a
path for the call, or None (default) to let the dispatcher choose; ``spmm`` also takes
``tune=``. Callers pass the run's :class:`~gnndist.kernels.settings.KernelSettings`
(``impl=s.impl, tune=s.tune``), read once at the entry point.
"""

from __future__ import annotations

from torch import Tensor

from . import dispatch
from .csr import CSR


def _check(csr: CSR, name: str, t: Tensor, first: int, what: str) -> None:
    if t.shape[0] != first:
        raise ValueError(f"{name} has {t.shape[0]} rows, expected {first} ({what})")
    if t.device != csr.device:
        raise ValueError(f"{name} is on {t.device} but the CSR is on {csr.device}")


def spmm(csr: CSR, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum", *,
         impl: str | None = None, tune: bool = True) -> Tensor:
    """Sparse-dense product: ``out[i] = sum_{e in row i} w[e] * x[col[e]]``.

    Args:
        csr: the adjacency, rows are destinations.
        x: source features.
        edge_weight: per-edge weight (default 1); ``[nnz, H]`` weighs head ``h`` of
            ``x [n_cols, H, D]`` separately (attention).
        reduce: ``"sum"`` (default) or ``"mean"`` (divided by the row's edge count; rows
            without edges give 0).
        impl: force one implementation (``"triton"``, ``"sparse"``, ``"reference"``; its
            backward too); None (default): the dispatcher chooses, timing the paths on CUDA.
        tune: when the dispatcher chooses on CUDA, measure the Triton path's tiles on this
            graph first (default True).

    Shapes:
        x ``[n_cols, F]`` or ``[n_cols, H, D]``; edge_weight ``[nnz]`` or ``[nnz, H]``;
        out ``[n_rows, F]`` or ``[n_rows, H, D]``
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    _check(csr, "x", x, csr.num_cols, "num_cols")
    if edge_weight is not None:
        _check(csr, "edge_weight", edge_weight, csr.nnz, "nnz")
        if edge_weight.dim() == 2 and (x.dim() != 3 or x.shape[1] != edge_weight.shape[1]):
            raise ValueError(f"edge_weight {tuple(edge_weight.shape)} needs x [n_cols, H, D], got {tuple(x.shape)}")
    return dispatch.run("spmm", csr, x, edge_weight, reduce, impl=impl, tune=tune)


def sddmm(csr: CSR, a: Tensor, b: Tensor, op: str = "add", *, impl: str | None = None) -> Tensor:
    """Sampled dense-dense op on every edge: ``a[row e] + b[col e]`` or ``<a[row e], b[col e]>``.

    Args:
        csr: the adjacency.
        a: destination-side values.
        b: source-side values.
        op: ``"add"`` (default; e.g. GAT's ``alpha_dst + alpha_src``) or ``"dot"`` over the
            last dim (e.g. transformer attention scores).

    Shapes:
        add: a ``[n_rows, H]``, b ``[n_cols, H]`` -> ``[nnz, H]``
        dot: a ``[n_rows, H, D]``, b ``[n_cols, H, D]`` -> ``[nnz, H]``; a ``[n_rows, D]`` -> ``[nnz]``
    """
    if op not in ("add", "dot"):
        raise ValueError(f"op must be 'add' or 'dot', got {op!r}")
    _check(csr, "a", a, csr.n_rows, "n_rows")
    _check(csr, "b", b, csr.num_cols, "num_cols")
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} differ after the first dim")
    return dispatch.run("sddmm", csr, a, b, op, impl=impl)


def segment_softmax(csr: CSR, scores: Tensor, *, impl: str | None = None) -> Tensor:
    """Softmax over each row's edges (a destination's incoming edges), numerically stable.

    Shapes:
        scores ``[nnz, H]`` or ``[nnz]`` -> same shape
    """
    _check(csr, "scores", scores, csr.nnz, "nnz")
    return dispatch.run("segment_softmax", csr, scores, impl=impl)


def dropout(x: Tensor, keys: Tensor, p: float, *, impl: str | None = None) -> Tensor:
    """Partition-invariant dropout: cell ``(i, j)`` of ``x`` is dropped where its 16-bit draw
    ``cell_draws(keys[i], j)`` is below ``mask_threshold(p)`` (:mod:`gnndist.kernels.dropout.reference`: ``p``
    rounded to a multiple of ``2**-16``), the others scaled by ``1 / (1 - p)``; the same bits on any device.

    Args:
        x: the rows to drop from.
        keys: each row's 32-bit key (``reference.node_keys`` of its dataset id, seed, epoch and key).
        p: the dropout probability, in ``[0, 1)``.
        impl: force one implementation (``"triton"``, ``"reference"``); None (default): Triton on CUDA.

    Shapes:
        x ``[n, F]``, keys ``[n]`` int32 -> ``[n, F]``
    """
    if keys.shape[0] != x.shape[0]:
        raise ValueError(f"keys has {keys.shape[0]} rows, expected {x.shape[0]} (the rows of x)")
    return dispatch.run("dropout", x, keys, p, impl=impl)


def segment_max(csr: CSR, x: Tensor, *, impl: str | None = None) -> Tensor:
    """Max of ``x[col e]`` over each row's edges; rows without edges give 0.

    The gradient goes to the arg-max (the row's first edge reaching the maximum).

    Shapes:
        x ``[n_cols, F]`` -> ``[n_rows, F]``
    """
    _check(csr, "x", x, csr.num_cols, "num_cols")
    return dispatch.run("segment_max", csr, x, impl=impl)

