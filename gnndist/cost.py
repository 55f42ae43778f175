"""The one cost model: alpha-beta per exchange plus compute per nonzero and per dense FLOP.

It serves ``--strategy auto`` (per-layer choice at run time), ``gnndist simulate`` (every
layout at any P, no processes) and the partitioner's balance choice (:func:`epoch_time`,
``gnndist partition --balance auto``).

One distributed SpMM of width ``F`` on one rank, forward plus backward (the backward is
the same exchanges reversed and the transposed product over the same nonzeros)::

    T = 2 * (overhead * exchanges + alpha * messages
             + b * F * (max(expand_send, expand_recv) + max(fold_send, fold_recv)) / beta)
        + 2 * gamma_sparse * nnz * F

where the counts are rows (see :class:`RankLoad`) and ``b`` bytes per element. A
layout's time is its slowest rank's. Dense work (``X @ W``) is the same for every layout
whose input and output are the 1D row layout, so it does not enter the choice; it is
added to the epoch time ``gnndist simulate`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gnndist.errors import UserError


@dataclass(frozen=True)
class Network:
    """Machine constants of the model.

    Attributes:
        name: preset name, or ``"probe"`` when measured.
        alpha: seconds per message (latency per peer).
        beta: bytes per second a rank can send (and receive) at once.
        gamma_sparse: seconds per nonzero per feature column of an SpMM.
        gamma_dense: seconds per dense floating-point operation.
        overhead: seconds per collective call, whatever its peers (launch and synchronisation).
    """

    name: str
    alpha: float
    beta: float
    gamma_sparse: float
    gamma_dense: float
    overhead: float = 0.0


# Targets for `gnndist simulate` and `--network`: order-of-magnitude constants, not measurements.
# An all-to-all posts its messages at once, so a peer costs a per-message overhead (alpha), and
# the latency and synchronisation of the collective are paid once per call (overhead).
NETWORKS: dict[str, Network] = {
    # GPUs of one node over NVLink (H100/H200 class: ~150 GB/s per GPU achieved in all-to-all)
    "nvlink": Network("nvlink", alpha=1e-6, beta=150e9, gamma_sparse=4e-12, gamma_dense=2e-14, overhead=15e-6),
    # GPUs across nodes, one 200 Gb/s InfiniBand/RoCE port per GPU
    "ib": Network("ib", alpha=2e-6, beta=25e9, gamma_sparse=4e-12, gamma_dense=2e-14, overhead=20e-6),
    # CPU ranks over 10 Gb/s Ethernet
    "ethernet": Network("ethernet", alpha=20e-6, beta=1.25e9, gamma_sparse=1e-9, gamma_dense=1e-11, overhead=100e-6),
}


def network(name: str, alpha: float | None = None, beta: float | None = None) -> Network:
    """A preset by name (``--network``), with ``alpha``/``beta`` overridden where given."""
    if name not in NETWORKS:
        raise UserError(f"unknown --network {name!r}; choose from {', '.join(sorted(NETWORKS))} or probe")
    net = NETWORKS[name]
    if alpha is not None:
        net = replace(net, alpha=alpha)
    if beta is not None:
        net = replace(net, beta=beta)
    return net


@dataclass
class RankLoad:
    """One rank's share of one distributed SpMM, in rows (multiply by ``F * b`` for bytes).

    Attributes:
        expand_send, expand_recv: input rows this rank sends to / receives from the ranks
            whose nonzeros need them (the halo exchange).
        fold_send, fold_recv: partial output rows this rank sends to / receives from their
            owners (the sparse reduce-scatter; zero in 1D).
        messages: peers this rank exchanges with, summed over the expand and the fold.
        nnz: nonzeros this rank multiplies.
        rows: output rows this rank owns.
        exchanges: collective calls of one SpMM direction (1 in 1D: the expand; 2 on a grid).
    """

    expand_send: int = 0
    expand_recv: int = 0
    fold_send: int = 0
    fold_recv: int = 0
    messages: int = 0
    nnz: int = 0
    rows: int = 0
    exchanges: int = 1

    def as_array(self) -> np.ndarray:
        return np.array([self.expand_send, self.expand_recv, self.fold_send, self.fold_recv,
                         self.messages, self.nnz, self.rows, self.exchanges], dtype=np.int64)

    @classmethod
    def from_array(cls, a) -> RankLoad:
        return cls(*(int(v) for v in a))

    def bytes(self, width: int, elem: int = 4) -> dict[str, int]:
        """Bytes of one forward and one backward SpMM: ``fwd_sent``, ``fwd_received``, ``bwd_sent``, ``bwd_received``.

        The backward runs both exchanges in reverse, so it sends what the forward received.
        """
        sent = (self.expand_send + self.fold_send) * width * elem
        recv = (self.expand_recv + self.fold_recv) * width * elem
        return {"fwd_sent": sent, "fwd_received": recv, "bwd_sent": recv, "bwd_received": sent}


def aggregate_first(f_in: int, f_out: int) -> bool:
    """Whether a GCN-like first layer (input without gradient) aggregates before its linear map.

    Mapping first costs an SpMM of width ``f_out`` forward and its ``A^T`` product backward;
    aggregating the input first costs one forward SpMM of width ``f_in`` (the input needs no
    gradient, so there is no backward SpMM and no reverse exchange). So aggregate first when
    ``f_in <= 2 * f_out``: never more SpMM work or halo bytes.
    """
    return f_in <= 2 * f_out


def spmm_time(load: RankLoad, width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one SpMM (forward + backward) of width ``width`` on one rank."""
    rows = max(load.expand_send, load.expand_recv) + max(load.fold_send, load.fold_recv)
    comm = net.overhead * load.exchanges + net.alpha * load.messages + elem * width * rows / net.beta
    return 2.0 * comm + 2.0 * net.gamma_sparse * load.nnz * width


def layout_time(loads: list[RankLoad], width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one SpMM of a layout: its slowest rank."""
    return max((spmm_time(ld, width, net, elem) for ld in loads), default=0.0)


def dense_time(rows: int, f_in: int, f_out: int, net: Network) -> float:
    """Modelled seconds of ``X @ W`` forward and its two backward products on ``rows`` rows."""
    return 3.0 * 2.0 * rows * f_in * f_out * net.gamma_dense


def allreduce_time(numel: int, ranks: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of a ring all-reduce of ``numel`` elements over ``ranks`` ranks."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) * net.alpha + 2.0 * (ranks - 1) / ranks * numel * elem / net.beta


def rank_layer_times(loads: list[RankLoad], f_in: int, f_out: int, net: Network, elem: int = 4,
                     first: bool = False) -> np.ndarray:
    """Modelled seconds of one GCN-like layer (``X @ W`` on the owned rows, then one SpMM of width
    ``f_out``), forward + backward, on every rank.

    ``first``: the model's first layer, whose input (the features) needs no gradient: ``X @ W``
    has two products (no ``dX``), and when :func:`aggregate_first` holds the layer aggregates
    the features instead, one forward SpMM of width ``f_in`` (no backward SpMM).

    Shapes:
        loads ``[P]`` -> ``[P]`` seconds.
    """
    products = 2.0 / 3.0 if first else 1.0
    if first and aggregate_first(f_in, f_out):
        return np.array([spmm_time(ld, f_in, net, elem) / 2 + products * dense_time(ld.rows, f_in, f_out, net)
                         for ld in loads])
    return np.array([spmm_time(ld, f_out, net, elem) + products * dense_time(ld.rows, f_in, f_out, net)
                     for ld in loads])


def epoch_time(loads: list[RankLoad], widths: tuple[int, ...], net: Network, elem: int = 4) -> float:
    """Modelled seconds of one training epoch of a GCN-like model on a partition (the partitioner's objective).

    Layer ``l`` maps width ``widths[l]`` to ``widths[l + 1]``: each rank multiplies its owned
    rows by ``W`` (per-row cost), exchanges its halo and aggregates its nonzeros at width
    ``widths[l + 1]`` (alpha-beta per exchange, per-edge cost) -- except the first layer, which
    aggregates the features first when :func:`aggregate_first` says so (see
    :func:`rank_layer_times`). The halo exchange synchronises the ranks, so a layer lasts as
    long as its slowest rank; the epoch is the sum over layers plus the all-reduce of the
    weight gradients::

        T = sum_l max_r rank_layer_times(r, widths[l], widths[l+1], first=(l == 0))
            + allreduce_time(sum_l widths[l] * widths[l+1], P)
    """
    if len(widths) < 2:
        raise ValueError(f"widths needs an input and an output width, got {widths}")
    layers = sum(rank_layer_times(loads, f_in, f_out, net, elem, first=(i == 0)).max(initial=0.0)
                 for i, (f_in, f_out) in enumerate(zip(widths[:-1], widths[1:])))
    weights = sum(f_in * f_out for f_in, f_out in zip(widths[:-1], widths[1:]))
    return float(layers + allreduce_time(weights, len(loads), net, elem))
