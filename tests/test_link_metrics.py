"""Link-prediction metrics against OGB's evaluators, scikit-learn and hand computations, then over ranks.

Hits@K and MRR equal ``ogbl-collab``'s and ``ogbl-citation2``'s evaluators on tied scores; small hand
cases pin the strict ``>`` of Hits@K, the half-counted ties of MRR and the grouped ties of AP. Over
P = 2 and 3 ranks holding uneven slices (some with no positives or no negatives), every rank reports
exactly the one-process value.
"""

import pytest
import torch

from gnndist.dist.grid import ProcessGrid
from gnndist.errors import UserError
from gnndist.tasks import metrics
from gnndist.testing import run_distributed

HITS_K = (1, 10, 50, 100)


def _scores(shape, kind, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "ties":  # few distinct values: positives tie with the threshold
        return torch.randint(0, 30, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _positives(n, kind, dtype, seed):
    """Scores of positives, a little above the negatives; with ties, every other one on an integer."""
    return _scores((n,), kind, dtype, seed) + 0.5 * (torch.arange(n) % 2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["ties", "distinct"])
@pytest.mark.parametrize("k", HITS_K, ids=[f"k{k}" for k in HITS_K])
def test_hits_at_k_equals_ogb_evaluator(k, kind, dtype):
    from ogb.linkproppred import Evaluator

    pos, neg = _positives(400, kind, dtype, 1), _scores((300,), kind, dtype, 2)
    evaluator = Evaluator("ogbl-collab")
    evaluator.K = k
    ref = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg})[f"hits@{k}"]
    value = metrics.hits_at_k(pos, neg, k, ProcessGrid())
    assert value == ref and 0.0 < value < 1.0
    if kind == "ties":  # some positives equal the threshold: `>` and `>=` differ
        kth = torch.topk(neg, k).values[-1]
        assert bool((pos == kth).any()) and float((pos >= kth).double().mean()) != value
    few = neg[: k - 1]  # fewer negatives than K: every positive counts
    assert metrics.hits_at_k(pos, few, k, ProcessGrid()) == 1.0 == \
        evaluator.eval({"y_pred_pos": pos, "y_pred_neg": few})[f"hits@{k}"]


def test_hits_at_k_by_hand():
    pos, neg, grid = torch.tensor([4.0, 4.5, 3.0, 6.0]), torch.tensor([5.0, 4.0, 4.0, 3.0, 1.0]), ProcessGrid()
    # threshold: the 2nd, 3rd largest negative is 4 (4 itself misses); the 4th is 3; the 5th is 1; 6 > 5 negatives
    expected = {1: 0.25, 2: 0.5, 3: 0.5, 4: 0.75, 5: 1.0, 6: 1.0}
    assert {k: metrics.hits_at_k(pos, neg, k, grid) for k in expected} == expected
    assert metrics.hits_at_k(pos[:0], neg, 2, grid) != metrics.hits_at_k(pos[:0], neg, 2, grid)  # no positive: nan
    with pytest.raises(ValueError):
        metrics.hits_at_k(pos, neg, 0, grid)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_mrr_equals_ogb_evaluator(dtype):
    from ogb.linkproppred import Evaluator

    pos, neg = _scores((500,), "ties", dtype, 3), _scores((500, 20), "ties", dtype, 4)
    out = Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    ref = float(out["mrr_list"].double().mean())  # OGB's reciprocal ranks are float32
    value = metrics.mrr(pos, neg, ProcessGrid())
    assert value == pytest.approx(ref, rel=1e-6, abs=0)
    strict = 1.0 / ((neg > pos[:, None]).sum(1).double() + 1)  # ties ranked first: a different value
    assert abs(float(strict.mean()) - value) > 1e-3


def test_mrr_by_hand():
    # positive 3 among (3, 4, 1): one above, one tied -> rank 2.5; positive 5 above all -> rank 1
    pos, neg = torch.tensor([3.0, 5.0]), torch.tensor([[3.0, 4.0, 1.0], [1.0, 2.0, 3.0]])
    assert metrics.mrr(pos, neg, ProcessGrid()) == pytest.approx((1 / 2.5 + 1) / 2, abs=1e-15)
    assert metrics.mrr(pos[:0], neg[:0], ProcessGrid()) != metrics.mrr(pos[:0], neg[:0], ProcessGrid())  # nan


def test_average_precision_and_auc_by_hand():
    # ties grouped: 0.9 (P 1, R 1/3), then the 0.5 group of 1, 0, 1 at once (P 3/4, R 1) -> 1/3 + 2/3 * 3/4;
    # any order inside the group would give 1, 11/12 or 29/36
    y, score = torch.tensor([1, 1, 0, 1, 0]), torch.tensor([0.9, 0.5, 0.5, 0.5, 0.1])
    assert metrics.average_precision(y, score) == pytest.approx(5 / 6, abs=1e-15)
    assert metrics.average_precision(y, score.flip(0)) == pytest.approx(2 / 3 * 2 / 4 + 1 / 3 * 3 / 5, abs=1e-15)
    # pos (3, 1) vs neg (2, 1): pairs won 1, 1, 0, 1/2 -> AUC 5/8; AP: 3 (P 1, R 1/2), then 1 tie (P 2/4, R 1)
    assert metrics.auc_ap(torch.tensor([3.0, 1.0]), torch.tensor([2.0, 1.0]), ProcessGrid()) == (0.625, 0.75)
    auc, ap = metrics.auc_ap(torch.tensor([1.0]), torch.zeros(0), ProcessGrid())
    assert auc != auc and ap == 1.0  # no negative: AUC undefined, every threshold fully precise


@pytest.mark.parametrize("kind", ["ties", "distinct"])
def test_auc_ap_equal_sklearn(kind):
    sk = pytest.importorskip("sklearn.metrics")
    pos, neg = _positives(300, kind, torch.float32, 5), _scores((700,), kind, torch.float32, 6)
    y = torch.cat([torch.ones(300), torch.zeros(700)]).numpy()
    s = torch.cat([pos, neg]).numpy()
    auc, ap = metrics.auc_ap(pos, neg, ProcessGrid())
    assert auc == pytest.approx(sk.roc_auc_score(y, s), abs=1e-12)
    assert ap == pytest.approx(sk.average_precision_score(y, s), abs=1e-12)


def test_link_metric_names():
    assert [metrics.parse_link_metric(n) for n in ("auc", "mrr", "hits@50")] == \
        [("auc", None), ("mrr", None), ("hits", 50)]
    for bad in ("hits@0", "hits@x", "hits@", "hits", "hits@-1", "hits@²", "auc@5", "precision"):
        with pytest.raises(UserError, match="expected auc, mrr or hits@K"):
            metrics.parse_link_metric(bad)
    with pytest.raises(ValueError):
        metrics.link_metrics("precision", torch.zeros(1), torch.zeros(1), ProcessGrid())


# Per rank: (positives, shared negatives, mrr rows) as [lo, hi) slices; empty slices on purpose.
SPLITS = {
    1: [((0, 400), (0, 300), (0, 200))],
    2: [((0, 400), (0, 0), (0, 0)), ((400, 400), (0, 300), (0, 200))],
    3: [((0, 7), (0, 250), (0, 150)), ((7, 7), (250, 251), (150, 150)), ((7, 400), (251, 300), (150, 200))],
}
LINK_NAMES = ("auc", "mrr", "hits@1", "hits@10", "hits@50", "hits@100", "hits@300", "hits@301")


def _rank_link_metrics(grid, pos, neg, pos_m, neg_m):
    """This rank's :func:`link_metrics` on its slices of the scores (``SPLITS[world]``)."""
    (p0, p1), (n0, n1), (r0, r1) = SPLITS[grid.world_size][grid.rank]
    out = {}
    for name in LINK_NAMES:
        if name == "mrr":
            out.update(metrics.link_metrics(name, pos_m[r0:r1], neg_m[r0:r1], grid))
        else:
            out.update(metrics.link_metrics(name, pos[p0:p1], neg[n0:n1], grid))
    return out


@pytest.mark.parametrize("world", [2, 3], ids=["P2", "P3"])
def test_link_metrics_over_ranks_equal_one_process_exactly(world):
    pos, neg = _positives(400, "ties", torch.float32, 7), _scores((300,), "ties", torch.float32, 8)
    pos_m, neg_m = _scores((200,), "ties", torch.float32, 9), _scores((200, 30), "ties", torch.float32, 10)
    args = (pos, neg, pos_m, neg_m)
    (alone,) = run_distributed(_rank_link_metrics, 1, *args)
    assert set(alone) == {"auc", "ap", "mrr"} | {n for n in LINK_NAMES if "@" in n}
    assert alone["hits@301"] == 1.0 and all(0.0 < v < 1.0 for n, v in alone.items() if n != "hits@301"), alone
    for rank, values in enumerate(run_distributed(_rank_link_metrics, world, *args)):
        assert values == alone, (world, rank)  # ==: ranks, counts and sorted groups are exact, whatever the split
