"""The cost model of a whole step (``gnndist.cost.step_time``): each term against a hand computation, and the
layers it describes against what the layers' code runs."""

from dataclasses import replace

import pytest
import torch

from gnndist.cost import Network, RankLoad, epoch_time, model_layers, step_time
from gnndist.cost.times import (
    ELEMENTWISE_IN,
    ELEMENTWISE_OUT,
    FOLD_PASSES,
    LAYER_FIXED,
    SPARSE_FILL,
    SPARSE_NONZERO,
    STEP_FIXED,
)

# two ranks of a 5-node graph: rank 0 sends 2 halo rows and receives 1, one peer; 6 and 4 nonzeros
LOADS = [RankLoad(expand_send=2, expand_recv=1, messages=1, nnz=6, rows=3),
         RankLoad(expand_send=1, expand_recv=2, messages=1, nnz=4, rows=2)]
# 4-byte rows of width w cost w seconds at beta = 4 B/s
NET = Network("hand", alpha=1.0, beta=4.0, gamma_sparse=0.5, gamma_dense=0.25, overhead=2.0, gamma_elem=0.125,
              step_overhead=3.0)


FIXED = 3.0 * (STEP_FIXED + LAYER_FIXED * 2)  # a 2-layer step's fixed cost, in tiny steps of 3 s


def elementwise(rows: int, f_in: int, f_out: int) -> float:
    return 0.125 * rows * (ELEMENTWISE_IN * f_in + ELEMENTWISE_OUT * f_out)


def test_sage_step_equals_the_hand_computation():
    """SAGE (3 -> 2 -> 1): both layers map first (narrower output), SpMMs forward and backward, two linears."""
    layers = model_layers("sage", (3, 2, 1))
    assert [(ly.width, ly.backward, ly.input_grad, ly.linears) for ly in layers] == [(2, True, False, 2),
                                                                                      (1, True, True, 2)]
    # layer 0, rank 0: exchange 2 x (overhead 2 + alpha 1 + 2 * max(2, 1) rows of width 2 at 4 B/s: 4) = 14;
    # aggregation 2 x 0.5 * 6 * 2 = 12; dense: 2 linears x (X @ W, dW) x 2 * 3 * 3 * 2 * 0.25 = 36, + elementwise
    r0 = 14 + 12 + 36 + elementwise(3, 3, 2)
    r1 = 14 + 2 * 0.5 * 4 * 2 + 2 * 2 * (2 * 2 * 3 * 2) * 0.25 + elementwise(2, 3, 2)  # 14 + 8 + 24
    assert r0 > r1
    # layer 1 (2 -> 1, with dX: three products per linear), rank 0 the slower
    q0 = 2 * (2 + 1 + 1 * 2) + 2 * 0.5 * 6 * 1 + 2 * 3 * (2 * 3 * 2 * 1) * 0.25 + elementwise(3, 2, 1)  # 10 + 6 + 18
    q1 = 2 * (2 + 1 + 1 * 2) + 2 * 0.5 * 4 * 1 + 2 * 3 * (2 * 2 * 2 * 1) * 0.25 + elementwise(2, 2, 1)  # 10 + 4 + 12
    assert q0 > q1
    allreduce = 2 * 1 * 1.0 + 2 * 1 / 2 * (2 * 3 * 2 + 2 * 2 * 1) * 4 / 4.0  # ring over 2 ranks, 16 weights: 2 + 16
    t = step_time(LOADS, layers, NET)
    assert t.layers == pytest.approx((r0, q0), rel=1e-12)
    assert t.exchange == pytest.approx(14 + 10, rel=1e-12)
    assert t.aggregation == pytest.approx(12 + 6, rel=1e-12)
    assert t.dense == pytest.approx(36 + elementwise(3, 3, 2) + 18 + elementwise(3, 2, 1), rel=1e-12)
    assert t.allreduce == pytest.approx(allreduce, rel=1e-12) and t.other == pytest.approx(FIXED, rel=1e-12)
    assert t.total == pytest.approx(r0 + q0 + allreduce + FIXED, rel=1e-12)
    assert t.total == pytest.approx(t.dense + t.aggregation + t.exchange + t.allreduce + t.other, rel=1e-12)
    assert set(t.columns()) == {"model_epoch_s", "model_aggregation_s", "model_dense_s", "model_exchange_s",
                                "model_allreduce_s", "model_other_s"}


def test_gcn_step_aggregates_first_and_per_layer_layouts():
    """GCN (3 -> 2 -> 1): the first layer aggregates its 3 features (one forward SpMM, no backward), sparse
    features (a tenth nonzero) cost a fill and their nonzeros; the second layer may run on another layout
    (here: twice rank 0's nonzeros)."""
    layers = model_layers("gcn", (3, 2, 1), feature_density=0.1)
    assert [(ly.width, ly.backward, ly.input_grad) for ly in layers] == [(3, False, False), (1, True, True)]
    other = [RankLoad(expand_send=2, expand_recv=1, messages=1, nnz=12, rows=3), LOADS[1]]
    # layer 0, rank 0: exchange 2 + 1 + 3 * 2 = 9 (forward only); aggregation 0.5 * 6 * 3 = 9;
    # dense 2 * (2 * 3 * 3 * 2) * 0.25 = 18, elementwise 0.125 * 3 * ((FILL + NONZERO / 10) * 3 + OUT * 2)
    r0 = 9 + 9 + 18 + 0.125 * 3 * ((SPARSE_FILL + SPARSE_NONZERO * 0.1) * 3 + ELEMENTWISE_OUT * 2)
    # layer 1, rank 0 on `other`: 2 * (2 + 1 + 2) + 2 * 0.5 * 12 + 3 * (2 * 3 * 2 * 1) * 0.25 = 10 + 12 + 9
    q0 = 10 + 12 + 9 + elementwise(3, 2, 1)
    allreduce = 2 + (3 * 2 + 2 * 1)
    t = step_time([LOADS, other], layers, NET)
    assert t.total == pytest.approx(r0 + q0 + allreduce + FIXED, rel=1e-12)
    assert t.aggregation == pytest.approx(9 + 12, rel=1e-12) and t.exchange == pytest.approx(9 + 10, rel=1e-12)


def test_the_first_gcn_layer_maps_first_where_both_orders_cost_the_same():
    """At F = 2 x hidden, aggregating first (one SpMM of width F, forward) and mapping first (width hidden,
    forward and backward) move the same rows and entries: the layer maps first, whose buffers are hidden wide,
    in the model the cost model describes and in the one that runs. Below the tie it aggregates first."""
    from gnndist.nn import GCNConv
    from gnndist.nn.models import GNN

    tie, below = model_layers("gcn", (4, 2))[0], model_layers("gcn", (3, 2))[0]
    assert (tie.width, tie.backward) == (2, True) and (below.width, below.backward) == (3, False)
    load = RankLoad(expand_send=3, expand_recv=5, fold_send=0, fold_recv=0, messages=2, nnz=7, rows=4, exchanges=1)
    assert sum(load.bytes(4).values()) // 2 == sum(load.bytes(2).values())  # F forward only = hidden both ways
    assert GNN(GCNConv, 64, 32, 8).convs[0].aggregate_first is False
    assert GNN(GCNConv, 63, 32, 8).convs[0].aggregate_first is True


def test_a_dense_input_and_a_grid_layouts_fold_cost_their_passes():
    """Dense features (over half nonzero) take ELEMENTWISE_IN passes; a rank that folds partial rows (2d, 1.5d)
    pays FOLD_PASSES elementwise passes per element it sends or receives, each direction; a product bound by
    memory costs a third of the probe's multiply per operand element."""
    assert model_layers("gcn", (3, 2, 1), feature_density=0.5)[0].in_passes == ELEMENTWISE_IN
    layer = model_layers("gcn", (8, 2), feature_density=1.0)[0]  # maps first: width 2, forward and backward
    assert (layer.width, layer.backward) == (2, True)
    grid = RankLoad(expand_send=1, expand_recv=1, fold_send=2, fold_recv=1, messages=2, nnz=4, rows=2, exchanges=2)
    flat = Network("flat", alpha=1.0, beta=4.0, gamma_sparse=0.5, gamma_dense=1e-9, overhead=2.0, gamma_elem=0.125)
    t = step_time([grid], [layer], flat)
    assert t.aggregation == pytest.approx(2 * (0.5 * 4 + FOLD_PASSES * 0.125 * 3) * 2, rel=1e-12)
    # exchange: 2 x (2 calls x 2 + 2 peers x 1 + (1 + 2) rows of width 2 at 4 B/s)
    assert t.exchange == pytest.approx(2 * (2 * 2 + 2 + 3 * 2), rel=1e-12)
    # X @ W and dW over [2, 8] and [2, 2]: a third of 0.125 per element, 2 of the 3 products (no dX)
    products = 2 / 3 * 3 * (1 / 3) * 0.125 * 2 * (8 + 2)
    assert t.dense == pytest.approx(products + 0.125 * 2 * (ELEMENTWISE_IN * 8 + ELEMENTWISE_OUT * 2), rel=1e-12)


def test_epoch_time_is_the_gcn_step():
    """The partitioner's objective is the step model's GCN case, to the last bit (partitions depend on it)."""
    for widths in ((3, 2, 1), (9, 2, 1), (9, 4, 4, 2)):
        assert epoch_time(LOADS, widths, NET) == step_time(LOADS, model_layers("gcn", widths), NET).total


@pytest.mark.parametrize("model,hidden", [("gcn", 4), ("gcn", 16), ("sage", 4), ("sage", 16)])
def test_model_layers_are_what_the_layers_run(part1, model, hidden):
    """The SpMM widths and directions model_layers describes are those a training step records."""
    from gnndist.dist.grid import ProcessGrid
    from gnndist.graph import DistGraph
    from gnndist.nn import build_model
    from gnndist.tasks.node import output_width

    g = DistGraph.load(part1, ProcessGrid())
    f_in, f_out = g.x.shape[1], output_width(g)  # 6 features, 3 classes
    net = build_model(model, f_in, hidden, f_out, 2, 0.5, "none", False)
    with g.context.step():
        net(g, g.x).sum().backward()
    calls = [(c.width, c.count > c.forward_only) for _, c in sorted(g.context.calls.items())]
    assert calls == [(ly.width, ly.backward) for ly in model_layers(model, (f_in, hidden, f_out))]
    with pytest.raises(ValueError, match="gat"):
        model_layers("gat", (f_in, hidden, f_out))
    assert torch.isfinite(next(net.parameters()).grad).all()


def test_two_levels_split_rows_by_host_and_price_the_hosts_link():
    """``on_hosts`` against a hand count on 2 hosts x 2 ranks; the exchange then lasts the longer of a rank's rows
    within its host at ``beta`` and its host's rows to the other at ``beta_host``; one host (or no ``beta_host``)
    is the one-level model; the gradient all-reduce crosses the slower link."""
    import numpy as np

    from gnndist.cost import allreduce_time, exchange_time, on_hosts

    expand = np.array([[0, 5, 1, 1], [5, 0, 1, 1], [2, 2, 0, 3], [2, 2, 3, 0]])  # [dst, src]
    fold = np.array([[0, 4, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])  # [src, dst]
    loads = [RankLoad(expand_send=int(expand[:, k].sum()), expand_recv=int(expand[k].sum()), exchanges=2)
             for k in range(4)]
    got = on_hosts(loads, expand, fold, ["a", "a", "b", "b"])
    # host a receives 1+1+1+1 = 4 rows from b and sends it 2+2+2+2 = 8; rank 0 gets 5 from rank 1 and sends 5
    assert [(ld.hosts, ld.expand_near, ld.expand_host) for ld in got] == [(2, 5, 8), (2, 5, 8), (2, 3, 8), (2, 3, 8)]
    # the fold: rank 0 sends 4 rows to rank 1 (its host); rank 3 sends 1 to rank 0 (the other host)
    assert [(ld.fold_near, ld.fold_host) for ld in got] == [(4, 1), (4, 1), (0, 1), (0, 1)]
    net = Network("n", alpha=0.0, beta=1e9, gamma_sparse=0.0, gamma_dense=0.0, beta_host=1e6)
    assert exchange_time(got[0], 10, net) == pytest.approx(40 * (8 / 1e6 + 1 / 1e6))  # both over the link
    assert exchange_time(got[0], 10, replace(net, beta=1e3)) == pytest.approx(40 * (5 / 1e3 + 4 / 1e3))
    one_level = exchange_time(loads[0], 10, net)
    assert exchange_time(replace(got[0], hosts=1), 10, net) == one_level == pytest.approx(40 * 9 / 1e9)
    assert exchange_time(got[0], 10, replace(net, beta_host=0.0)) == one_level
    assert allreduce_time(100, 4, net, hosts=2) == pytest.approx(2 * 3 / 4 * 400 / 1e6)
    assert allreduce_time(100, 4, net) == pytest.approx(2 * 3 / 4 * 400 / 1e9)
    # messages (issue 47 item 3): rank 0's expand peers elsewhere: sends to 2 and 3, receives from 2 and 3 -> 2;
    # its fold: receives from rank 3 -> 1; rank 2's: 2 in the expand, none in the fold
    assert [ld.messages_far for ld in got] == [3, 2, 2, 3]
    msgs = replace(got[0], messages=5, expand_near=0, expand_host=0, fold_near=0, fold_host=0)
    priced = Network("m", alpha=1e-6, beta=1e9, gamma_sparse=0.0, gamma_dense=0.0, beta_host=1e6, alpha_host=1e-4)
    assert exchange_time(msgs, 10, priced) == pytest.approx(2 * 1e-6 + 3 * 1e-4)  # 2 near, 3 far
    assert exchange_time(msgs, 10, replace(priced, alpha_host=0.0)) == pytest.approx(5 * 1e-6)  # one alpha
