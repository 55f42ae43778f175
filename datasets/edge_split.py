"""Link-prediction splits: the positive and negative node pairs of train / valid / test, in dataset ids.

A graph with an edge split (``data.link``, an :class:`EdgeSplit`) trains a link predictor: its
``edge_index`` is the *message* graph, the training positives only, so no validation or test
edge (nor its reverse) is ever aggregated over. The partition stores the split beside the parts
(:mod:`gnndist.partition.pipeline`); every rank reads its slice of each pair array.

Negatives come in two forms:

* shared (``[M, 2]`` pairs): every positive of the split is ranked against all of them (OGB's
  Hits@K for collab / ddi / ppa; GAE's ROC-AUC and AP on as many negatives as positives);
* per positive (``[n, K]`` destination ids): positive ``i`` = ``(s, t)`` is ranked against
  ``(s, neg[i, j])`` (OGB's MRR for citation2).

Training negatives are not stored: they are drawn per step from a hash of (seed, epoch, pair index).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

LINK_METRICS = ("auc", "mrr")  # besides "hits@K": the metric a split is scored by


@dataclass
class EdgeSplit:
    """The pairs of a link-prediction task, dataset ids, int64.

    Args:
        train: training positives, one direction each (the message graph holds both directions).
        valid, test: the positives scored by the metric.
        valid_neg, test_neg: their negatives: ``[M, 2]`` shared pairs, or ``[n, K]`` destinations per positive.
        metric: ``"auc"`` (ROC-AUC; AP reported beside it), ``"hits@K"`` or ``"mrr"``.
        kind: ``"random"`` (a seeded split of the graph's edges) or ``"ogb"`` (the dataset's own files).
        valid_as_input: OGB collab's test-time protocol may add the validation edges to the message graph
            (``--use-valedges-as-input``); whether the dataset allows it.
        train_weight: per training positive (collab's ``weight``), else None; not used by the loss.

    Shapes:
        train ``[E_train, 2]``; valid ``[E_val, 2]``; test ``[E_test, 2]``;
        valid_neg ``[M_val, 2]`` or ``[E_val, K]``; test_neg ``[M_test, 2]`` or ``[E_test, K]``.
    """

    train: Tensor
    valid: Tensor
    test: Tensor
    valid_neg: Tensor
    test_neg: Tensor
    metric: str = "auc"
    kind: str = "random"
    valid_as_input: bool = False
    train_weight: Tensor | None = None

    @property
    def per_positive(self) -> bool:
        """Whether the negatives are per positive (``[n, K]`` destinations), not shared pairs."""
        return self.metric == "mrr"

    def arrays(self) -> dict[str, Tensor]:
        """The pair arrays by the name the partition stores them under."""
        out = {"train": self.train, "valid": self.valid, "test": self.test,
               "valid_neg": self.valid_neg, "test_neg": self.test_neg}
        if self.train_weight is not None:
            out["train_weight"] = self.train_weight
        return {k: v.to(torch.int64) if k != "train_weight" else v for k, v in out.items()}

    def to_meta(self) -> dict:
        """What META.json says of the split (its counts, metric, kind)."""
        return {"metric": self.metric, "kind": self.kind, "valid_as_input": self.valid_as_input,
                "counts": {k: list(v.shape) for k, v in self.arrays().items()}}
