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
:data:`~gnndist.cost.times.STEP_FIXED` + :data:`~gnndist.cost.times.LAYER_FIXED` per layer). A layer lasts
as long as its slowest rank (its exchanges synchronise the ranks)::

    T = sum_l max_r (dense_lr + aggregation_lr + exchange_lr) + allreduce
        + step_overhead * (STEP_FIXED + LAYER_FIXED * layers)

The presets have ``gamma_elem = step_overhead = 0``: their times are those of the formulas
above; the probe (:mod:`gnndist.dist.probe`) measures all of them.

Three modules, their public names imported from here: :mod:`~gnndist.cost.networks` (the machine constants, the
presets, the model's measured error), :mod:`~gnndist.cost.loads` (a rank's rows, split by host) and
:mod:`~gnndist.cost.times` (the seconds; its structural constants, fitted on the calibration grid, are read and
set there).
"""

from gnndist.cost.loads import RankLoad, host_index, on_hosts
from gnndist.cost.networks import MODEL_ERROR, MODEL_ERROR_WORST, NETWORKS, Network, network
from gnndist.cost.times import (
    HIDDEN,
    Layer,
    StepTime,
    aggregate_first,
    allreduce_time,
    dense_time,
    epoch_time,
    exchange_time,
    layer_parts,
    layer_rank_time,
    layout_time,
    model_layers,
    model_widths,
    multiply_time,
    rank_layer_times,
    run_time,
    spmm_time,
    step_time,
)

__all__ = [
    "HIDDEN", "Layer", "MODEL_ERROR", "MODEL_ERROR_WORST", "NETWORKS", "Network", "RankLoad", "StepTime",
    "aggregate_first", "allreduce_time", "dense_time", "epoch_time", "exchange_time", "host_index", "layer_parts",
    "layer_rank_time", "layout_time", "model_layers", "model_widths", "multiply_time", "network", "on_hosts",
    "rank_layer_times", "run_time", "spmm_time", "step_time",
]
