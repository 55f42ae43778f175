"""The model's seconds: per exchange, per SpMM, per layer and per training step (the formulas of :mod:`gnndist.cost`).

Its structural constants (:data:`FOLD_PASSES`, :data:`ELEMENTWISE_IN`, :data:`ELEMENTWISE_OUT`, :data:`SPARSE_FILL`,
:data:`SPARSE_NONZERO`, :data:`PRODUCT_PASS`, :data:`STEP_FIXED`, :data:`LAYER_FIXED`) live here, where the model
reads them: ``benchmarks/cost_fit.py`` fits them by setting them on this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnndist.cost.loads import RankLoad
from gnndist.cost.networks import Network


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


def exchange_time(load: RankLoad, width: int, net: Network, elem: int = 4) -> float:
    """Modelled seconds of one direction of an SpMM's exchanges on one rank: calls, peers and bytes.

    On several hosts (a load split by :func:`~gnndist.cost.loads.on_hosts`, a network with ``beta_host``) each
    exchange lasts the longer of this rank's rows within its host at ``beta`` and its host's rows to and from the
    other hosts at ``beta_host`` (an all-to-all posts both at once, over two different links); otherwise all its rows
    at ``beta``. Its messages to ranks of other hosts cost ``alpha_host`` each where the network has one, the rest
    ``alpha``.
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
