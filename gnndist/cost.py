"""The one cost model: alpha-beta per exchange plus compute per nonzero and per dense FLOP.

It serves ``--strategy auto`` (per-layer choice at run time), ``gnndist simulate`` (every
layout at any P, no processes) and the partitioner's balance choice (:func:`epoch_time`,
``gnndist partition --balance auto``).

One distributed SpMM of width ``F`` on one rank, forward plus backward (the backward is
the same exchanges reversed and the transposed product over the same nonzeros)::

    T = 2 * (overhead * exchanges + alpha * messages
             + b * F * (max(expand_send, expand_recv) + max(fold_send, fold_recv)) / beta)
        + 2 * (gamma_sparse * nnz + FOLD_PASSES * gamma_elem * (fold_send + fold_recv)) * F

where the counts are rows (see :class:`RankLoad`) and ``b`` bytes per element. A
layout's time is its slowest rank's. On several hosts the model has two levels (:func:`on_hosts`,
:func:`exchange_time`): each exchange takes the longer of a rank's rows within its host at ``beta`` and
its host's rows to and from other hosts, all its ranks together, at ``beta_host`` (the host's link).

Dense work (``X @ W``) is the same for every layout
whose input and output are the 1D row layout, so it does not enter the choice; it is
added to the epoch time ``gnndist simulate`` reports.

The whole training step (:func:`step_time`, what every user of the model calls in the end)
adds, per layer and rank, the dense work (``X @ W`` forward, ``dW`` and, past the first
layer, ``dX``: ``gamma_dense`` per FLOP, or a pass over the operands at ``gamma_elem`` per
element where that is longer; the elementwise passes over the layer's rows: ``gamma_elem``
per element), and per step the all-reduce of the weight gradients and a fixed
cost (loss, optimiser, autograd and Python dispatch: ``step_overhead`` times
:data:`STEP_FIXED` + :data:`LAYER_FIXED` per layer). A layer lasts as long as
its slowest rank (its exchanges synchronise the ranks)::

    T = sum_l max_r (dense_lr + aggregation_lr + exchange_lr) + allreduce
        + step_overhead * (STEP_FIXED + LAYER_FIXED * layers)

The presets have ``gamma_elem = step_overhead = 0``: their times are those of the formulas
above; the probe (:mod:`gnndist.dist.probe`) measures all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

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
        gamma_elem: seconds per element of an elementwise pass over activations (dropout,
            bias, activation, scaling and their backward; see :data:`ELEMENTWISE`).
        step_overhead: seconds of a tiny training step (a 2-layer MLP on 8 rows: loss, optimiser, autograd and
            Python dispatch); a step's fixed cost is :data:`STEP_FIXED` + :data:`LAYER_FIXED` per layer of these.
        beta_host: bytes per second one host's link carries each way between hosts, all its ranks together (a job
            on several hosts; ``beta`` is then a rank's rate within its host); 0: one level, ``beta`` for every byte.
        alpha_host: seconds per message to a rank of another host (a job on several hosts; ``alpha`` is then a
            message's within its host); 0: ``alpha`` for every message.
    """

    name: str
    alpha: float
    beta: float
    gamma_sparse: float
    gamma_dense: float
    overhead: float = 0.0
    gamma_elem: float = 0.0
    step_overhead: float = 0.0
    beta_host: float = 0.0
    alpha_host: float = 0.0

    def as_dict(self) -> dict:
        """The constants by name (JSON-able; ``gnndist bench`` models its rows from them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def constants(cls) -> list[str]:
        """The names of the machine constants (every field but ``name``)."""
        return [f.name for f in fields(cls) if f.name != "name"]

    @classmethod
    def from_values(cls, name: str, values, prefix: str = "") -> Network:
        """The network ``name`` with each constant ``c`` read as ``float(values[prefix + c])`` (a probe file's
        entry; a bench row's ``net_*`` columns); ``beta_host`` and ``alpha_host``, which older ones lack, are 0 where
        missing."""
        optional = {"beta_host": 0.0, "alpha_host": 0.0}
        return cls(name, **{c: float(values[prefix + c] if prefix + c in values or c not in optional
                                     else optional[c]) for c in cls.constants()})


# The model's relative error on measured epochs (|modelled / measured - 1|, the median over the validation
# grid of benchmarks/README.md, "Cost model": 66 runs on a quiet 2-core CPU, probed constants): `gnndist
# simulate` prints it as the band of its times, and `auto` times candidates modelled within it of each other
# instead of trusting the model. Measured on that machine only; on GPUs the model is not yet calibrated.
MODEL_ERROR = 0.09
MODEL_ERROR_WORST = 0.31  # the worst case of that grid

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
        hosts: the hosts of the job the next four were counted for (:func:`on_hosts`); 1: one host, or counts
            that do not know the hosts (a partition's), and the next four are unused.
        expand_near, fold_near: rows this rank exchanges with ranks of its own host in the expand / the fold
            (the larger of sent and received).
        expand_host, fold_host: rows this rank's host exchanges with other hosts in the expand / the fold, all its
            ranks together over the link they share (the larger of sent and received; the same on each of its ranks).
        messages_far: of ``messages``, the peers on other hosts (counted as ``messages`` is).
    """

    expand_send: int = 0
    expand_recv: int = 0
    fold_send: int = 0
    fold_recv: int = 0
    messages: int = 0
    nnz: int = 0
    rows: int = 0
    exchanges: int = 1
    hosts: int = 1
    expand_near: int = 0
    fold_near: int = 0
    expand_host: int = 0
    fold_host: int = 0
    messages_far: int = 0

    STORED = 8  # the fields a partition stores (META.json ``layouts``): the counts up to ``exchanges``

    def as_array(self) -> np.ndarray:
        return np.array([getattr(self, f.name) for f in fields(self)], dtype=np.int64)

    @classmethod
    def from_array(cls, a) -> RankLoad:
        """The load of :meth:`as_array`'s values, or of their first :attr:`STORED` (a partition's ``layouts``, which
        count one host)."""
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
    ``f_in < 2 * f_out``: less SpMM work and fewer halo bytes. At ``f_in == 2 * f_out`` both orders
    cost the same and the layer maps first, for memory: its SpMM's input, output and halo buffers
    are ``f_out`` wide, not ``f_in`` (benchmarks/README.md, "The first layer at F = 2 x hidden").
    """
    return f_in < 2 * f_out


def host_index(hosts) -> np.ndarray:
    """``[P]`` every rank's host (any labels, one per rank) as the index of the host's first rank."""
    first: dict = {}
    return np.array([first.setdefault(h, k) for k, h in enumerate(hosts)], dtype=np.int64)


def on_hosts(loads: list[RankLoad], expand: np.ndarray, fold: np.ndarray, host_of) -> list[RankLoad]:
    """``loads`` (one per rank) with each exchange split by host: the rows a rank exchanges with the ranks of
    its host, and the rows its host exchanges with the others (:class:`RankLoad`'s ``*_near``, ``*_host``).

    Args:
        loads: every rank's load of one layout.
        expand: ``[P, P]`` rows rank ``dst`` receives from rank ``src`` in the expand, ``[dst, src]``.
        fold: ``[P, P]`` partial rows rank ``src`` sends to rank ``dst`` in the fold, ``[src, dst]`` (zeros in 1D).
        host_of: ``[P]`` the host (any label) of every rank.
    """
    host = host_index(host_of)
    same = host[:, None] == host[None, :]  # [P, P]

    def split(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows within the host, the host's rows across hosts, and the peers on other hosts (counted as
        ``RankLoad.messages`` is: the larger of the send and receive peers), per rank."""
        m = np.asarray(m, dtype=np.int64)
        near, far = np.where(same, m, 0), np.where(same, 0, m)
        per_host = lambda v: np.bincount(host, weights=v, minlength=len(host))[host]  # noqa: E731
        return (np.maximum(near.sum(0), near.sum(1)),
                np.maximum(per_host(far.sum(0)), per_host(far.sum(1))).astype(np.int64),
                np.maximum(np.count_nonzero(far, axis=0), np.count_nonzero(far, axis=1)))

    (e_near, e_host, e_far), (f_near, f_host, f_far) = split(expand), split(fold)
    far = e_far + f_far
    hosts = len(np.unique(host))
    return [replace(ld, hosts=hosts, expand_near=int(e_near[k]), fold_near=int(f_near[k]),
                    expand_host=int(e_host[k]), fold_host=int(f_host[k]), messages_far=int(far[k]))
            for k, ld in enumerate(loads)]


def exchange_time(load: RankLoad, width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one direction of an SpMM's exchanges on one rank: calls, peers and bytes.

    On several hosts (a load split by :func:`on_hosts`, a network with ``beta_host``) each exchange lasts the
    longer of this rank's rows within its host at ``beta`` and its host's rows to and from the other hosts at
    ``beta_host`` (an all-to-all posts both at once, over two different links); otherwise all its rows at ``beta``.
    Its messages to ranks of other hosts cost ``alpha_host`` each where the network has one, the rest ``alpha``.
    """
    far = load.messages_far if load.hosts > 1 and net.alpha_host > 0 else 0
    fixed = net.overhead * load.exchanges + net.alpha * (load.messages - far) + net.alpha_host * far
    if load.hosts > 1 and net.beta_host > 0:
        return fixed + elem * width * (max(load.expand_near / net.beta, load.expand_host / net.beta_host)
                                       + max(load.fold_near / net.beta, load.fold_host / net.beta_host))
    rows = max(load.expand_send, load.expand_recv) + max(load.fold_send, load.fold_recv)
    return fixed + elem * width * rows / net.beta


# Elementwise passes per element of a partial output row a rank folds (sends, or receives and adds): the
# partial rows' SpMM output, packing, the receive buffer and the index_add into the owned rows (2d and 1.5d;
# 1d folds nothing). Fitted on the calibration grid of benchmarks/README.md, "Cost model" (there, 2d's
# measured aggregation was 2-2.5x 1d's at the same nonzeros).
FOLD_PASSES = 12.0


def multiply_time(load: RankLoad, width: int, net: Network) -> float:
    """Modelled seconds of one direction of an SpMM's local work on one rank: its nonzeros at ``gamma_sparse``
    per nonzero and column, and the partial rows it folds (:data:`FOLD_PASSES` at ``gamma_elem`` per element)."""
    return (net.gamma_sparse * load.nnz + FOLD_PASSES * net.gamma_elem * (load.fold_send + load.fold_recv)) * width


def spmm_time(load: RankLoad, width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one SpMM (forward + backward) of width ``width`` on one rank."""
    return 2.0 * exchange_time(load, width, net, elem) + 2.0 * multiply_time(load, width, net)


def layout_time(loads: list[RankLoad], width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one SpMM of a layout: its slowest rank."""
    return max((spmm_time(ld, width, net, elem) for ld in loads), default=0.0)


def dense_time(rows: int, f_in: int, f_out: int, net: Network) -> float:
    """Modelled seconds of ``X @ W`` forward and its two backward products on ``rows`` rows."""
    return 3.0 * 2.0 * rows * f_in * f_out * net.gamma_dense


def allreduce_time(numel: int, ranks: int, net: Network, elem: int = 4, hosts: int = 1) -> float:
    """Modelled seconds of a ring all-reduce of ``numel`` elements over ``ranks`` ranks (on ``hosts`` hosts, the
    ring crosses each host's link once each way: the slower of ``beta`` and ``beta_host`` carries it)."""
    if ranks <= 1:
        return 0.0
    beta = min(net.beta, net.beta_host) if hosts > 1 and net.beta_host > 0 else net.beta
    return 2.0 * (ranks - 1) * net.alpha + 2.0 * (ranks - 1) / ranks * numel * elem / beta


# Elementwise passes of a layer, forward and backward, in units of the probe's multiply (``gamma_elem``), per
# element of its input rows and of its output rows (dropout of the input: its hashed mask and scaling, forward
# and backward; bias, activation, GCN scaling and their backward on the output). IN is read off the layers'
# code; OUT (which a 2-layer step cannot tell from the next layer's IN) is fitted on the calibration grid of
# benchmarks/README.md, "Cost model", as are the sparse-input constants.
ELEMENTWISE_IN = 4.0
ELEMENTWISE_OUT = 12.0
# the model's input features when stored sparse (under half nonzero): dropout writes one dense [rows, f_in]
# buffer (SPARSE_FILL per element) and hashes, masks and scatters only the nonzeros (SPARSE_NONZERO per
# nonzero; gnndist.graph.DistGraph.dropout)
SPARSE_FILL = 1.0
SPARSE_NONZERO = 10.0
# a matrix product reads each operand element once, where the probe's multiply (gamma_elem) reads two and
# writes one: a product bound by memory costs this many gamma_elem per element of its operands
PRODUCT_PASS = 1.0 / 3.0


# The fixed cost of a step (ops dispatched, autograd, Python), in units of the probe's `step_overhead` (a
# tiny 2-layer MLP step): STEP_FIXED + LAYER_FIXED per layer, fitted on the calibration grid of
# benchmarks/README.md, "Cost model" (a 2-layer step: 11.8 tiny steps; gnndist steps of 1, 2 and 4 GCN / SAGE
# layers on 300 nodes, one process, measured 6.2-6.8 + 4.4-5.5 per layer).
STEP_FIXED = 5.0
LAYER_FIXED = 3.4


@dataclass(frozen=True)
class Layer:
    """One layer of a modelled training step.

    Attributes:
        f_in, f_out: widths of its input and output rows.
        width: width of its SpMM (``f_out`` when the linear map runs first, ``f_in`` when it aggregates first).
        backward: the SpMM runs backward too (its input needs a gradient): its exchanges reversed
            and the ``A^T`` product.
        input_grad: the layer computes the gradient of its input (every layer but the first).
        linears: linear maps ``f_in -> f_out`` (GCN 1; SAGE 2: neighbours and self).
        in_passes, out_passes: elementwise passes per element of the input and output rows.
    """

    f_in: int
    f_out: int
    width: int
    backward: bool = True
    input_grad: bool = True
    linears: int = 1
    in_passes: float = ELEMENTWISE_IN
    out_passes: float = ELEMENTWISE_OUT

    @property
    def weights(self) -> int:
        """Weights whose gradients are all-reduced (biases aside)."""
        return self.linears * self.f_in * self.f_out


def model_layers(model: str, widths: tuple[int, ...], feature_density: float = 1.0) -> list[Layer]:
    """The layers of ``model`` (``gcn`` or ``sage``) mapping ``widths[l]`` to ``widths[l + 1]``.

    The SpMM widths and directions are those of the layers' code: GCN maps first except a first
    layer for which :func:`aggregate_first` holds (its SpMM of the features has no backward);
    SAGE aggregates the narrower of its input and output (``gnndist.nn.SAGEConv``). The first
    layer's input, the features, needs no gradient (no ``dX``). ``feature_density``: the fraction
    of the features that is nonzero; under a half, the features' dropout runs on their nonzeros
    (:data:`SPARSE_FILL`, :data:`SPARSE_NONZERO`).
    """
    if len(widths) < 2:
        raise ValueError(f"widths needs an input and an output width, got {widths}")
    if model not in ("gcn", "sage"):
        raise ValueError(f"the cost model describes gcn and sage layers, not {model!r}")
    out = []
    for i, (f_in, f_out) in enumerate(zip(widths[:-1], widths[1:])):
        first = i == 0
        if model == "gcn":
            agg_in = first and aggregate_first(f_in, f_out)
        else:
            agg_in = not f_out < f_in
        width = f_in if agg_in else f_out
        sparse = first and feature_density < 0.5  # gnndist.graph.DistGraph.dropout's rule
        passes = SPARSE_FILL + SPARSE_NONZERO * feature_density if sparse else ELEMENTWISE_IN
        out.append(Layer(f_in, f_out, width, backward=not (first and agg_in), input_grad=not first,
                         linears=1 if model == "gcn" else 2, in_passes=passes))
    return out


def _products(load: RankLoad, layer: Layer, net: Network) -> float:
    """Modelled seconds of a layer's matrix products on one rank: ``X @ W``, ``dW`` and past the first layer
    ``dX`` per linear map, each the larger of its FLOPs (``gamma_dense``) and one pass over its operands
    (:data:`PRODUCT_PASS` ``* gamma_elem`` per element of ``[rows, f_in]`` and ``[rows, f_out]``: a wide
    skinny product is memory-bound)."""
    products = (1.0 if layer.input_grad else 2.0 / 3.0) * layer.linears
    flops = dense_time(load.rows, layer.f_in, layer.f_out, net)
    if net.gamma_elem:
        flops = max(flops, 3.0 * PRODUCT_PASS * net.gamma_elem * load.rows * (layer.f_in + layer.f_out))
    return products * flops


def layer_parts(load: RankLoad, layer: Layer, net: Network, elem: int = 4) -> tuple[float, float, float]:
    """Modelled seconds ``(dense, aggregation, exchange)`` of one layer on one rank, forward + backward."""
    dirs = 2.0 if layer.backward else 1.0
    dense = _products(load, layer, net)
    dense += net.gamma_elem * load.rows * (layer.in_passes * layer.f_in + layer.out_passes * layer.f_out)
    return dense, dirs * multiply_time(load, layer.width, net), dirs * exchange_time(load, layer.width, net, elem)


def layer_rank_time(load: RankLoad, layer: Layer, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one layer on one rank, forward + backward (the sum of :func:`layer_parts`)."""
    spmm = spmm_time(load, layer.width, net, elem)
    t = (spmm if layer.backward else spmm / 2) + _products(load, layer, net)
    if net.gamma_elem:
        t += net.gamma_elem * load.rows * (layer.in_passes * layer.f_in + layer.out_passes * layer.f_out)
    return t


@dataclass(frozen=True)
class StepTime:
    """Modelled seconds of one training step and its parts (the slowest rank's, layer by layer).

    ``total = sum(layers) + allreduce + other``; ``dense + aggregation + exchange = sum(layers)``
    up to rounding. ``layers``: each layer's slowest rank's time.
    """

    total: float
    dense: float
    aggregation: float
    exchange: float
    allreduce: float
    other: float
    layers: tuple[float, ...]

    def columns(self, prefix: str = "model_") -> dict[str, float]:
        """``{prefix}epoch_s`` and ``{prefix}{part}_s`` of every part (bench CSV columns)."""
        return {f"{prefix}epoch_s": self.total, **{f"{prefix}{k}_s": getattr(self, k)
                                                   for k in ("aggregation", "dense", "exchange", "allreduce", "other")}}


GRAD_ELEM = 4  # bytes per weight-gradient element: fp32 master weights at every --precision and --comm-dtype


def step_time(loads, layers: list[Layer], net: Network, elem: int = 4) -> StepTime:
    """Modelled seconds of one training step: every layer forward and backward, the gradient
    all-reduce and the fixed overhead (the one model of :mod:`gnndist.cost`; see the module docstring).

    Args:
        loads: the ranks' :class:`RankLoad` of every layer's layout, ``[layers][P]``, or one ``[P]``
            list for every layer.
        layers: the step's :class:`Layer` list (:func:`model_layers`).
        net: machine constants.
        elem: bytes per exchanged element (the rows; the weight gradients are fp32, :data:`GRAD_ELEM`).
    """
    per_layer = loads if loads and isinstance(loads[0], (list, tuple)) else [loads] * len(layers)
    if len(per_layer) != len(layers):
        raise ValueError(f"{len(per_layer)} layouts for {len(layers)} layers")
    times, parts = [], np.zeros(3)
    for lds, layer in zip(per_layer, layers):
        t = np.array([layer_rank_time(ld, layer, net, elem) for ld in lds])
        if not len(t):
            times.append(0.0)
            continue
        k = int(np.argmax(t))
        times.append(float(t.max(initial=0.0)))
        parts += layer_parts(lds[k], layer, net, elem)
    P = max((len(lds) for lds in per_layer), default=1)
    hosts = max((ld.hosts for lds in per_layer for ld in lds), default=1)
    allreduce = allreduce_time(sum(layer.weights for layer in layers), P, net, GRAD_ELEM, hosts)  # fp32 always
    fixed = net.step_overhead * (STEP_FIXED + LAYER_FIXED * len(layers)) if net.step_overhead else 0.0
    total = sum(times) + allreduce + fixed
    return StepTime(float(total), *(float(v) for v in parts), float(allreduce), float(fixed), tuple(times))


def rank_layer_times(loads: list[RankLoad], f_in: int, f_out: int, net: Network, elem: int = 4,
                     first: bool = False) -> np.ndarray:
    """Modelled seconds of one GCN-like layer (``X @ W`` on the owned rows, then one SpMM of width
    ``f_out``), forward + backward, on every rank (:func:`layer_rank_time` of a GCN layer).

    ``first``: the model's first layer, whose input (the features) needs no gradient: ``X @ W``
    has two products (no ``dX``), and when :func:`aggregate_first` holds the layer aggregates
    the features instead, one forward SpMM of width ``f_in`` (no backward SpMM).

    Shapes:
        loads ``[P]`` -> ``[P]`` seconds.
    """
    layer = model_layers("gcn", (f_in, f_out))[0] if first else Layer(f_in, f_out, f_out)
    return np.array([layer_rank_time(ld, layer, net, elem) for ld in loads])


def epoch_time(loads: list[RankLoad], widths: tuple[int, ...], net: Network, elem: int = 4) -> float:
    """Modelled seconds of one training epoch of a GCN on a partition (the partitioner's objective):
    :func:`step_time` of :func:`model_layers` ``("gcn", widths)`` on the 1D layout ``loads``.

    Layer ``l`` maps width ``widths[l]`` to ``widths[l + 1]``: each rank multiplies its owned
    rows by ``W`` (per-row cost), exchanges its halo and aggregates its nonzeros at width
    ``widths[l + 1]`` (alpha-beta per exchange, per-edge cost) -- except the first layer, which
    aggregates the features first when :func:`aggregate_first` says so (see
    :func:`rank_layer_times`). The halo exchange synchronises the ranks, so a layer lasts as
    long as its slowest rank; the epoch is the sum over layers plus the all-reduce of the
    weight gradients (and the network's fixed step overhead)::

        T = sum_l max_r rank_layer_times(r, widths[l], widths[l+1], first=(l == 0))
            + allreduce_time(sum_l widths[l] * widths[l+1], P) + fixed (see :func:`step_time`)
    """
    return step_time(loads, model_layers("gcn", widths), net, elem).total


def run_time(form: str | None, widths: tuple[int, ...], loads: list[list[RankLoad]], net: Network,
             feature_density: float = 1.0, elem: int = 4) -> StepTime | None:
    """Modelled seconds of one training step of a run (what its epoch should take): :func:`step_time` of
    :func:`model_layers` ``(form, widths, feature_density)``, each layer on the loads of the layout it ran.

    The one home of a run's modelled epoch: the run's summary and per-epoch log (``model_epoch_time_s``),
    and ``gnndist bench``'s model columns call it.

    Args:
        form: the model's form here, ``"gcn"`` or ``"sage"`` (its spec's ``cost``,
            :class:`gnndist.nn.ModelSpec`); ``None`` (a model the cost model does not describe) returns ``None``.
        widths: ``(F, hidden, ..., hidden, out)``, the model's widths (``out``: its output width, 1 for a
            binary task).
        loads: per layer, in the model's order, every rank's :class:`RankLoad` of the layout that layer ran
            (``[layers][P]``); ``None`` is returned when there are not ``len(widths) - 1`` of them.
        net: machine constants.
        feature_density: the fraction of the input features that is nonzero.
        elem: bytes per exchanged element (2 for ``--comm-dtype bf16``).
    """
    if form is None or len(loads) != len(widths) - 1:
        return None
    return step_time(loads, model_layers(form, tuple(widths), feature_density), net, elem)


HIDDEN = 16  # the default model's hidden width (gnndist.config.ModelConfig)


def model_widths(num_features: int, num_classes: int, hidden: int = HIDDEN, layers: int = 2) -> tuple[int, ...]:
    """Widths of the modelled GCN: ``(F, hidden, ..., hidden, classes)`` with ``layers`` transforms."""
    return (max(num_features, 1),) + (hidden,) * (layers - 1) + (max(num_classes, 1),)
