"""Evaluation metrics, exact over P ranks: one definition each, whatever the world size.

Count metrics (``acc``, ``f1-micro``, ``f1-macro``) reduce to sums that every rank adds up
(:func:`counts` then :func:`from_counts`, all-reduced in between); ``rocauc`` ranks every
score of a split, so the trainer gathers ``(y, score)`` from every rank and calls
:func:`roc_auc` on the whole split. Definitions follow scikit-learn and OGB:

* ``acc``: single-label, argmax (one logit: ``logit > 0``) equals the label; multi-label,
  every label right.
* ``rocauc``: area under the ROC curve with tied scores averaged (Mann-Whitney U);
  multi-label, the mean over labels that have both a positive and a negative node in the
  split (OGB's ``ogbn-proteins`` rule).
* ``f1-micro`` / ``f1-macro``: F1 of the predicted classes (multi-label: of every label
  cell); macro averages over classes present in the labels or the predictions.

Heads: ``C`` logits for ``C > 2`` classes (cross-entropy), one logit for two classes
(binary cross-entropy), ``T`` logits for ``T`` labels (binary cross-entropy per label).

Link prediction (:func:`link_metrics`): each rank scores any slice of the positive pairs and of the
negatives; every rank returns the value of the whole split, bit for bit the one-process value:

* ``hits@K`` (OGB's ``ogbl-collab`` / ``ogbl-ddi`` rule): the share of positives scoring strictly
  above the ``K``-th largest score of the negatives shared by all positives; 1.0 if fewer than ``K``.
* ``mrr`` (OGB's ``ogbl-citation2`` rule): mean of ``1 / rank`` of each positive among its own
  negatives, a tie counted as half above and half below (``rank = (#> + #>=) / 2 + 1``).
* ``auc``: ROC-AUC and average precision (scikit-learn's step-wise definition, ties grouped)
  of every positive (label 1) against every negative (label 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnndist.config import METRICS, parse_link_metric
from gnndist.datasets.spec import dataset_spec
from gnndist.errors import UserError

if TYPE_CHECKING:
    from gnndist.dist.grid import ProcessGrid


SPLITS = ("train", "val", "test")


def metric_key(split: str, metric: str) -> str:
    """The key of a metric value in the log and the summary: ``val_acc``, ``test_f1_macro``, ..."""
    return f"{split}_{metric.replace('-', '_')}"


def default_metric(meta: dict) -> str:
    """A node task's metric where ``--metric`` is ``auto``: the partition's, else the one its dataset's spec
    declares (:func:`gnndist.datasets.spec.dataset_spec`: OGB's Evaluator's for ogbn-*, ROC-AUC for the binary
    heterophily sets), else ROC-AUC for multi-label labels (OGB's choice for them) and accuracy for the rest.

    ROC-AUC needs two classes or several labels: a graph of a ROC-AUC dataset's name with more classes gets the rest's.
    """
    if meta.get("metric") in METRICS:
        return meta["metric"]
    spec = dataset_spec(str(meta.get("dataset") or ""))
    multilabel = bool(meta.get("multilabel"))
    declared = spec.metric if spec is not None else None
    if declared in METRICS and (declared != "rocauc" or multilabel or int(meta.get("classes", 0)) == 2):
        return declared
    return "rocauc" if multilabel else "acc"


def predictions(logits: Tensor, multilabel: bool) -> Tensor:
    """Predicted classes ``[n]`` (or 0/1 labels ``[n, T]``) from logits of any head."""
    if multilabel or logits.shape[1] == 1:
        out = logits > 0
        return out if multilabel else out.view(-1).long()
    return logits.argmax(dim=1)


def scores(logits: Tensor, multilabel: bool) -> Tensor:
    """What ROC-AUC ranks: the positive logit (binary, ``[n]``) or every label's logit (``[n, T]``)."""
    if multilabel:
        return logits
    if logits.shape[1] == 1:
        return logits.view(-1)
    if logits.shape[1] == 2:
        return logits[:, 1] - logits[:, 0]  # the log-odds of class 1 under softmax
    raise ValueError(f"rocauc needs a binary or multi-label task, not {logits.shape[1]} classes")


def counts(metric: str, logits: Tensor, y: Tensor, num_classes: int) -> Tensor:
    """Summable statistics of ``metric`` over these rows, float64 on ``logits.device``.

    Shapes:
        logits ``[n, C]``, y ``[n]`` or ``[n, T]``  ->  acc ``[2]``; f1-micro ``[3]``; f1-macro ``[3, C]``
    """
    multilabel = y.dim() > 1
    pred = predictions(logits, multilabel)
    if metric == "acc":
        right = (pred == y.bool()).all(dim=1) if multilabel else pred == y
        return torch.stack([right.sum(), torch.tensor(y.shape[0], device=y.device)]).double()
    if multilabel:
        p, t = pred, y.bool()
        tp, fp, fn = (p & t).sum(dim=0), (p & ~t).sum(dim=0), (~p & t).sum(dim=0)  # [T] each
    else:
        c = max(num_classes, 2)
        onehot_p = torch.nn.functional.one_hot(pred, c).bool()  # [n, C]
        onehot_t = torch.nn.functional.one_hot(y.long(), c).bool()
        tp = (onehot_p & onehot_t).sum(dim=0)
        fp = (onehot_p & ~onehot_t).sum(dim=0)
        fn = (~onehot_p & onehot_t).sum(dim=0)
    per_class = torch.stack([tp, fp, fn]).double()  # [3, C]
    if metric == "f1-micro":
        return per_class.sum(dim=1)
    if metric == "f1-macro":
        return per_class
    raise ValueError(f"{metric} is not a count metric")


def from_counts(metric: str, stats: Tensor) -> float:
    """The metric from statistics summed over every rank (0.0 for an empty split)."""
    if metric == "acc":
        return float(stats[0] / stats[1]) if stats[1] > 0 else 0.0
    tp, fp, fn = stats[0], stats[1], stats[2]
    denom = 2 * tp + fp + fn
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(denom))
    if metric == "f1-micro":
        return float(f1)
    present = denom > 0  # classes seen in the labels or the predictions
    return float(f1[present].mean()) if bool(present.any()) else 0.0


def roc_auc(y: Tensor, score: Tensor) -> float:
    """Exact ROC-AUC of ``score`` against 0/1 ``y``, ties averaged; multi-label: mean over valid labels.

    Returns ``nan`` when no label has both classes.

    Shapes:
        y ``[n]`` and score ``[n]``, or y ``[n, T]`` and score ``[n, T]``
    """
    if y.dim() > 1:
        vals = [roc_auc(y[:, t], score[:, t]) for t in range(y.shape[1])]
        vals = [v for v in vals if v == v]
        return sum(vals) / len(vals) if vals else float("nan")
    pos, neg = _sorted_halves(y, score)
    return _auc(pos, neg)


def average_precision(y: Tensor, score: Tensor) -> float:
    """Average precision of ``score`` against 0/1 ``y``: ``sum_n (R_n - R_{n-1}) * P_n`` over the distinct
    scores in decreasing order (scikit-learn's ``average_precision_score``); tied scores form one threshold.

    Returns ``nan`` without a positive (scikit-learn warns and says 0).

    Shapes:
        y ``[n]``, score ``[n]``
    """
    return _ap(*_sorted_halves(y, score))


def _sorted_halves(y: Tensor, score: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The positives' and the negatives' scores, each sorted ascending (their own dtype: a float's widening is
    exact, so the order and the ties are float64's)."""
    y, score = y.bool().view(-1).cpu(), score.detach().view(-1).cpu()
    pos, neg = score[y].numpy(), score[~y].numpy()
    pos.sort()
    neg.sort()
    return pos, neg


# positives ranked among the negatives at once (their int64 ranks: 16 bytes a positive)
RANK_BLOCK = 2**20


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC-AUC from the sorted scores of each class: each positive counts the negatives below it and half those it
    ties (Mann-Whitney's U with midranks, exact in int64). ``nan`` without both classes."""
    if not len(pos) or not len(neg):
        return float("nan")
    twice_u = 0  # sum over positives of 2 #{neg < p} + #{neg == p}
    for a in range(0, len(pos), RANK_BLOCK):
        block = pos[a : a + RANK_BLOCK]
        twice_u += int(np.searchsorted(neg, block, "left").sum()) + int(np.searchsorted(neg, block, "right").sum())
    return twice_u / (2 * len(pos) * len(neg))


def _ap(pos: np.ndarray, neg: np.ndarray) -> float:
    """Average precision from the sorted scores of each class: each positive adds ``1 / n_pos`` times the precision
    at its own score ``t``, ``#{pos >= t} / #{scores >= t}`` (a tie group of ``c`` positives is scikit-learn's one
    threshold with recall step ``c / n_pos``; thresholds without a positive add nothing). A block of positives at
    a time. ``nan`` without a positive."""
    if not len(pos):
        return float("nan")
    total = 0.0
    for a in range(0, len(pos), RANK_BLOCK):
        block = pos[a : a + RANK_BLOCK]
        tp = len(pos) - np.searchsorted(pos, block, "left")  # positives >= t
        fp = len(neg) - np.searchsorted(neg, block, "left")  # negatives >= t
        total += float((tp / (tp + fp)).sum())
    return total / len(pos)


def hits_at_k(pos: Tensor, neg: Tensor, k: int, grid: ProcessGrid) -> float:
    """Hits@K over every rank (collective): share of positives scoring strictly above the ``k``-th largest
    negative of all ranks; 1.0 when all ranks hold fewer than ``k`` negatives (OGB's ``_eval_hits``).

    Each rank sends its top ``min(k, m_local)`` negatives; ``nan`` when no rank holds a positive.

    Args:
        pos: this rank's scores of positive pairs.
        neg: this rank's scores of negative pairs, shared: each positive is compared with every rank's.
        k: ``K >= 1``.
        grid: the job's process grid.

    Shapes:
        pos ``[n_local]``, neg ``[m_local]`` (either may be empty)
    """
    if k < 1:
        raise ValueError(f"hits@K needs K >= 1, not {k}")
    pos, neg = pos.detach().view(-1), neg.detach().view(-1)
    top = torch.topk(neg, min(k, neg.numel())).values.cpu()  # [min(k, m_local)]
    parts = grid.all_gather_object((top, neg.numel()))
    if sum(m for _, m in parts) < k:
        return 1.0
    kth = torch.topk(torch.cat([t for t, _ in parts]), k).values[-1].to(pos.device)  # 0-dim, neg's dtype
    stats = torch.tensor([int((pos > kth).sum()), pos.numel()], dtype=torch.int64, device=grid.device)
    hits, n = grid.all_reduce_(stats).tolist()
    return hits / n if n else float("nan")


def mrr(pos: Tensor, neg: Tensor, grid: ProcessGrid) -> float:
    """Mean reciprocal rank over every rank (collective), each positive ranked among its own negatives with
    ties counted half: ``rank = (#{neg > pos} + #{neg >= pos}) / 2 + 1`` (OGB's ``_eval_mrr``).

    Ranks are gathered as a histogram of ``2 * (rank - 1)`` (exact integers), so the float64 mean is the
    same at any world size; OGB's own is float32. ``nan`` when no rank holds a positive.

    Shapes:
        pos ``[n_local]``, neg ``[n_local, K]`` (``[0, K]`` on a rank without positives)
    """
    twice = (neg > pos.view(-1, 1)).sum(1) + (neg >= pos.view(-1, 1)).sum(1)  # [n_local] 2 * (rank - 1)
    values, counts = torch.unique(twice.detach(), return_counts=True)
    parts = grid.all_gather_object((values.cpu(), counts.cpu()))
    rank2, inverse = torch.unique(torch.cat([v for v, _ in parts]), return_inverse=True)  # sorted
    hist = torch.zeros(rank2.numel(), dtype=torch.int64).index_add_(0, inverse, torch.cat([c for _, c in parts]))
    total = int(hist.sum())
    if total == 0:
        return float("nan")
    return float((hist.double() * (2.0 / (rank2.double() + 2))).sum()) / total


def auc_ap(pos: Tensor, neg: Tensor, grid: ProcessGrid) -> tuple[float, float]:
    """ROC-AUC (:func:`roc_auc`) and :func:`average_precision` of every rank's positives (label 1) against every
    rank's negatives (label 0), gathered on each rank (collective); rank order does not matter. Each class is sorted
    in place in the gathered buffer: the scores' own bytes, no order or labels beside them.

    Shapes:
        pos ``[n_local]``, neg ``[m_local]`` (either may be empty)
    """
    score, (n_pos, _) = gather_flat([pos.detach().cpu().view(-1), neg.detach().cpu().view(-1)], grid)
    s = score.numpy()
    halves = s[:n_pos], s[n_pos:]
    for h in halves:
        h.sort()
    return _auc(*halves), _ap(*halves)


def gather_flat(local: list[Tensor], grid: ProcessGrid) -> tuple[Tensor, list[int]]:
    """Every rank's 1-D tensors ``local`` (CPU, one dtype) in one buffer, ``local[0]`` of every rank in rank order,
    then ``local[1]``'s, ...; and each position's total count (collective). One broadcast a (rank, tensor) into the
    buffer's slice: nothing is pickled or copied twice, so a gathered element costs its own bytes."""
    if not grid.distributed:
        return torch.cat(local), [t.numel() for t in local]
    counts = grid.all_gather_object([t.numel() for t in local])  # [P][len(local)]
    out = torch.empty(sum(map(sum, counts)), dtype=local[0].dtype)
    at = 0
    for j, mine in enumerate(local):
        for r in range(grid.world_size):
            view = out[at : at + counts[r][j]]
            if r == grid.rank:
                view.copy_(mine)
            if view.numel():
                grid.broadcast_(view, src=r)
            at += counts[r][j]
    return out, [sum(c[j] for c in counts) for j in range(len(local))]


def link_metrics(metric: str, pos: Tensor, neg: Tensor, grid: ProcessGrid) -> dict[str, float]:
    """The link-prediction ``metric`` of the split every rank holds a slice of (collective).

    ``"auc"`` -> ``{"auc", "ap"}`` (:func:`auc_ap`), ``"hits@K"`` -> ``{"hits@K"}`` (:func:`hits_at_k`),
    ``"mrr"`` -> ``{"mrr"}`` (:func:`mrr`). Names are checked where the user writes them
    (:func:`gnndist.config.parse_link_metric`); here an unknown one is a ``ValueError``.

    Shapes:
        pos ``[n_local]``; neg ``[m_local]`` (auc, hits: shared negatives) or ``[n_local, K]`` (mrr)
    """
    try:
        kind, k = parse_link_metric(metric)
    except UserError as e:
        raise ValueError(str(e)) from None
    if kind == "auc":
        auc, ap = auc_ap(pos, neg, grid)
        return {"auc": auc, "ap": ap}
    if kind == "mrr":
        return {"mrr": mrr(pos, neg, grid)}
    return {f"hits@{k}": hits_at_k(pos, neg, k, grid)}


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``; 0 for one value), as OGB's and PyG's loggers report."""
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean, std
