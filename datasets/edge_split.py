"""Link-prediction splits: the positive and negative node pairs of train / valid / test, in dataset ids.

A graph with an edge split (``data.link``, an :class:`EdgeSplit`) trains a link predictor: its
``edge_index`` is the *message* graph, the training positives only, so no validation or test
edge (nor its reverse) is ever aggregated over in training (``--use-valedges-as-input`` scores the test split over
training + validation edges, a second message graph the partition stores). The partition stores the split beside
the parts (:mod:`gnndist.partition.pipeline`); every rank reads its slice of each pair array.

Negatives come in two forms:

* shared (``[M, 2]`` pairs): every positive of the split is ranked against all of them (OGB's
  Hits@K for collab / ddi / ppa; GAE's ROC-AUC and AP on as many negatives as positives);
* per positive (``[n, K]`` destination ids): positive ``i`` = ``(s, t)`` is ranked against
  ``(s, neg[i, j])`` (OGB's MRR for citation2).

Training negatives are not stored: they are drawn per step from a hash of (seed, epoch, pair index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnndist.errors import UserError

from .graph import check_edge_range, clean_edges

if TYPE_CHECKING:
    from torch_geometric.data import Data


@dataclass
class EdgeSplit:
    """The pairs of a link-prediction task, dataset ids, int64.

    Args:
        train: training positives, one direction each (the message graph holds both directions).
        valid, test: the positives scored by the metric.
        valid_neg, test_neg: their negatives: ``[M, 2]`` shared pairs, or ``[n, K]`` destinations per positive.
        metric: ``"auc"`` (ROC-AUC; AP reported beside it), ``"hits@K"`` or ``"mrr"``.
        kind: ``"random"`` (a seeded split of the graph's edges) or ``"ogb"`` (the dataset's own files).
        valid_as_input: whether OGB's own example offers the test-time protocol of adding the validation edges to
            the message graph for this dataset (collab); ``--use-valedges-as-input`` takes any split with
            validation edges (:mod:`gnndist.partition.link`).
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

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={list(v.shape)}" for k, v in self.arrays().items())
        return f"EdgeSplit({self.metric}, {self.kind}: {counts})"

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


def parse_edge_split(text: str) -> tuple[float, float, float]:
    """``--edge-split``: ``"85,5,10"`` (percentages) or ``"0.85,0.05,0.1"`` -> (train, valid, test) fractions.

    Numbers summing to more than 1 are percentages. The result passes :func:`check_edge_fractions`.
    """
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3:
        raise UserError(f"--edge-split {text!r}: give three numbers train,valid,test, e.g. 85,5,10 or 0.85,0.05,0.1")
    if sum(values) > 1 + 1e-6:
        values = [v / 100 for v in values]
    return check_edge_fractions(tuple(values))


def check_edge_fractions(fractions: tuple[float, float, float]) -> tuple[float, float, float]:
    """``fractions`` (train, valid, test) as floats, or a one-line `UserError` naming ``--edge-split``."""
    if len(fractions) != 3:
        raise UserError(f"--edge-split: three fractions train,valid,test needed, got {len(fractions)}")
    train, valid, test = (float(f) for f in fractions)
    if not all(np.isfinite(f) and f >= 0 for f in (train, valid, test)):
        raise UserError(f"--edge-split: fractions must be >= 0, got {train:g},{valid:g},{test:g}")
    if abs(train + valid + test - 1) > 1e-6:
        raise UserError(f"--edge-split: fractions must sum to 1 (or percentages to 100), "
                        f"got {train:g},{valid:g},{test:g} (sum {train + valid + test:g})")
    if train <= 0:
        raise UserError("--edge-split: the training fraction must be > 0")
    return train, valid, test


def random_edge_split(
    edge_index: Tensor, num_nodes: int, fractions: tuple[float, float, float] = (0.85, 0.05, 0.10), seed: int = 0
) -> tuple[EdgeSplit, Tensor]:
    """A seeded random link split of a graph's undirected edges, GAE-style (ROC-AUC on as many negatives as positives).

    The undirected edges are the unique pairs ``u < v`` of ``edge_index`` (either direction, duplicates and
    self-loops dropped), in sorted order; a permutation from ``numpy.random.default_rng(seed)`` deals them out as
    PyG's ``RandomLinkSplit`` does: ``E_val = int(valid * E)``, ``E_test = int(test * E)`` (rounded down), the rest
    train. Negatives are then drawn from the same generator: ``E_val + E_test`` distinct uniform node pairs
    ``u != v`` (stored ``u < v``) that are no edge of the whole graph; the first ``E_val`` are validation's,
    the rest test's. They are drawn in vectorised batches, rejecting edges, repeats and self-pairs.

    Args:
        edge_index: the graph's edges, any direction and duplication.
        num_nodes: N; ids lie in ``[0, N)``.
        fractions: (train, valid, test), summing to 1 (:func:`parse_edge_split` reads ``--edge-split``).
        seed: seed of the permutation and of the negatives.

    Returns:
        The `EdgeSplit` (metric ``"auc"``, kind ``"random"``, shared negatives) and the message graph: the training
        edges in both directions, sorted by (row, col) as every loader's ``edge_index``.

    Shapes:
        edge_index: [2, E_any] -> train [E_train, 2], valid / valid_neg [E_val, 2], test / test_neg [E_test, 2];
        message edge_index [2, 2 * E_train].
    """
    fractions = check_edge_fractions(fractions)
    n = int(num_nodes)
    ei = torch.as_tensor(edge_index)
    src, dst = ei[0].to(torch.int64).numpy(), ei[1].to(torch.int64).numpy()
    check_edge_range(src, dst, n)
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    keys = np.sort(lo * n + hi)  # np.sort, not np.unique nor torch.unique: ~10x faster on 10M keys
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]  # [E] undirected edges u * N + v, u < v, sorted
    del lo, hi, keep
    e = keys.size
    n_val, n_test = int(fractions[1] * e), int(fractions[2] * e)  # PyG RandomLinkSplit's rounding
    n_train = e - n_val - n_test
    if min(c for c, f in zip((n_train, n_val, n_test), fractions, strict=True) if f > 0) < 1:
        raise UserError(f"--edge-split: the graph has {e} undirected edges, too few for at least one "
                        f"train/valid/test positive each ({n_train}/{n_val}/{n_test})")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(e)
    train, valid, test = (_pairs(keys[p], n) for p in np.split(perm, [n_train, n_train + n_val]))
    del perm
    neg = _non_edges(keys, n, n_val + n_test, rng)  # [E_val + E_test, 2]
    split = EdgeSplit(train, valid, test, neg[:n_val], neg[n_val:], metric="auc", kind="random")
    message = clean_edges(train[:, 0].numpy(), train[:, 1].numpy(), n)  # [2, 2 * E_train]
    return split, message


def _non_edges(edge_keys: np.ndarray, n: int, count: int, rng: np.random.Generator) -> Tensor:
    """``count`` distinct uniform pairs ``u < v`` that are not in ``edge_keys`` (sorted ``u * n + v``), in draw order.

    Each batch draws about enough pairs for what is still missing at the current acceptance rate; a draw is
    rejected when ``u == v``, when it is an edge, or when an earlier draw took the pair.
    """
    total = n * (n - 1) // 2
    free = total - edge_keys.size
    if count > free:
        raise UserError(f"--edge-split: the graph has {free} node pairs without an edge, fewer than the {count} "
                        f"valid/test negatives it needs (one per positive)")
    taken = np.empty(0, dtype=np.int64)  # sorted keys already drawn
    out = []
    got = 0
    while got < count:
        need = count - got
        accept = (free - got) / total * (n - 1) / n  # chance that one draw is a new non-edge
        batch = int(min(need / accept * 1.1 + 1024, 1 << 24))
        uv = rng.integers(0, n, size=(2, batch), dtype=np.int64)
        uv = uv[:, uv[0] != uv[1]]
        keys = np.minimum(uv[0], uv[1]) * n + np.maximum(uv[0], uv[1])
        uniq, first = np.unique(keys, return_index=True)  # sorted: the searches below walk both arrays in order
        first = first[~(_isin_sorted(uniq, edge_keys) | _isin_sorted(uniq, taken))]
        keys = keys[np.sort(first)[:need]]  # new non-edges, each at its first draw, in draw order
        out.append(keys)
        taken = np.sort(np.concatenate([taken, keys]))
        got += keys.size
    return _pairs(np.concatenate(out), n)  # [count, 2]


def _pairs(keys: np.ndarray, n: int) -> Tensor:
    """Pair keys ``u * n + v`` as rows ``(u, v)``.

    Shapes:
        keys: [E] -> [E, 2] int64.
    """
    return torch.from_numpy(np.stack([keys // n, keys % n], axis=1))


def _isin_sorted(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in ``sorted_keys`` (ascending): one binary search each (fast for sorted keys)."""
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    at = np.searchsorted(sorted_keys, keys).clip(max=sorted_keys.size - 1)
    return sorted_keys[at] == keys


def set_edge_split(data: Data, split: EdgeSplit, message_edge_index: Tensor) -> Data:
    """Make ``data`` a link-prediction graph: ``data.link = split``, ``data.edge_index`` = the message graph."""
    data.link = split
    data.edge_index = message_edge_index
    return data
