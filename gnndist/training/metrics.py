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
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnndist.config import METRICS

ROCAUC_DATASETS = ("tolokers", "minesweeper", "questions")  # Platonov et al. 2023 score these by ROC-AUC


def default_metric(meta: dict) -> str:
    """The dataset's standard metric: OGB's evaluator for ogbn-*, ROC-AUC for binary heterophily sets and
    multi-label datasets, else acc."""
    if meta.get("metric") in METRICS:
        return meta["metric"]
    name = str(meta.get("dataset") or "")
    if name.startswith("ogbn-"):
        from ogb.nodeproppred import Evaluator

        try:
            return Evaluator(name).eval_metric
        except ValueError:  # an ogbn-* name outside OGB's table: the rules below
            pass
    if name.replace("_", "-") in ROCAUC_DATASETS and int(meta.get("classes", 0)) == 2:
        return "rocauc"
    if meta.get("multilabel"):
        return "rocauc"  # multi-label tasks without a metric of their own: OGB's choice for them (ogbn-proteins)
    return "acc"


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
    y = y.bool().view(-1)
    s = score.double().view(-1)
    n_pos = int(y.sum())
    n_neg = y.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    s_sorted, order = torch.sort(s)
    _, inverse, tie = torch.unique_consecutive(s_sorted, return_inverse=True, return_counts=True)
    end = torch.cumsum(tie, 0).double()  # 1-based rank of each tie group's last member
    avg_rank = end - (tie.double() - 1) / 2  # [groups] mean rank inside the group
    ranks = avg_rank[inverse]  # [n] in sorted order
    pos_rank_sum = float(ranks[y[order]].sum())
    return (pos_rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``; 0 for one value), as OGB's and PyG's loggers report."""
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean, std
