"""Node property prediction: a classifier head per node, cross-entropy over the training nodes, exact metrics.

The encoder's output is the head: one logit per class (``C > 2``), one (binary), one per label
(multi-label). The loss is the sum over a rank's training nodes divided by the *global* training count;
metrics are exact over every rank (:mod:`gnndist.tasks.metrics`).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gnndist.config import METRICS
from gnndist.errors import UserError
from gnndist.partition.components import LABELS, MASKS_PART
from gnndist.tasks import metrics
from gnndist.tasks.base import Task, register_task
from gnndist.tasks.metrics import SPLITS, metric_key


@register_task
class NodeTask(Task):
    """Classify (or tag) every node: labels and node masks of the partition.

    Args:
        graph: this rank's :class:`~gnndist.graph.DistGraph`.
        cfg: the training config (``--metric``).
    """

    name = "node"
    noun = "a node model"
    parts = (LABELS, MASKS_PART)  # y, the masks and every stored split
    outputs = ("probs", "logits", "class", "embedding")
    scored = ("probs", "logits")  # the metric from the written rows equals the run's

    def __init__(self, graph, cfg):
        if graph.num_train == 0:
            raise UserError("the partition has no training nodes (train_mask is empty)")
        self.graph = graph
        self.multilabel = graph.y.dim() > 1
        self.binary = not self.multilabel and graph.num_classes == 2  # one logit, binary cross-entropy
        self.metric = metric_of(cfg, graph)
        self.metrics = (self.metric,)  # what evaluate() reports; the first selects the model
        self.out_width = output_width(graph)

    def resolved(self, cfg):
        """``cfg`` with ``--task node``."""
        return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, task="node"))

    def widths(self, hidden: int) -> tuple[int, int]:
        """The encoder's input and output widths: the features', one logit per class (or label)."""
        return self.graph.x.shape[1], self.out_width

    def wrap(self, encoder: nn.Module, cfg, seed: int) -> nn.Module:
        """The model trained: the encoder itself (its output is the head). ``--embedding learn`` is refused on a
        homogeneous graph: a node task learns rows only for a typed graph's featureless types (``--model rgcn``)."""
        if cfg.model.embedding == "learn" and self.graph.hetero is None:
            raise UserError("--embedding learn is for a typed graph's featureless node types (--model rgcn) and for "
                            "--task link; this node task's graph has one node type")
        return encoder

    def encoder(self, model: nn.Module) -> nn.Module:
        """The encoder of the model trained (its representation layers are the encoder's): the model itself."""
        return model

    def loss(self, model: nn.Module, epoch: int, step: int) -> Tensor:
        """This rank's share of the global mean loss of one step."""
        g = self.graph
        return self.objective(model(g, g.x))

    def objective(self, logits: Tensor) -> Tensor:
        """This rank's share of the global mean loss over training nodes, of the owned rows' ``logits``."""
        g = self.graph
        mask = g.train_mask
        if self.multilabel:
            per = F.binary_cross_entropy_with_logits(logits[mask], g.y[mask].float(), reduction="sum")
            return per / (g.num_train * g.y.shape[1])
        if self.binary:  # logits [n_owned, 1]
            per = F.binary_cross_entropy_with_logits(logits[mask, 0], g.y[mask].float(), reduction="sum")
            return per / g.num_train
        return F.cross_entropy(logits[mask], g.y[mask].long(), reduction="sum") / g.num_train

    @torch.no_grad()
    def evaluate(self, model: nn.Module, autocast) -> dict[str, float]:
        """The run's metric on train / val / test over every rank, keyed ``train_<metric>`` etc. (collective)."""
        g = self.graph
        with autocast():
            logits = model(g, g.x).float()  # [n_owned, C]
        return split_metrics(g, logits, self.metric)

    # ------------------------------------------------------------------ gnndist predict
    def check_output(self, what: str, layer: int | None = None, valedges: bool = False) -> None:
        """:meth:`Task.check_output <gnndist.tasks.base.Task.check_output>`; ``embedding`` names its layer."""
        super().check_output(what, layer, valedges)
        if what == "embedding" and layer is None:
            raise UserError("--what embedding needs --layer K (the representation after layer K)")

    def predicted(self, model: nn.Module, out: Tensor, what: str, pairs: str | None = None) -> Tensor:
        """Per owned node: class probabilities, logits, the class (:func:`values_of`) or a layer's rows."""
        return values_of(out, what, self.multilabel) if what != "embedding" else super().predicted(model, out, what)

    def written_metrics(self, written: Tensor) -> dict:
        """The metric from written logits or probabilities: the run's, for the same weights."""
        return {"metric": self.metric, **split_metrics(self.graph, written, self.metric)}


def values_of(out: Tensor, what: str, multilabel: bool) -> Tensor:
    """What is written per node of a classifier's output: probabilities, logits or the class.

    Shapes:
        out ``[n_owned, C]`` -> ``[n_owned, C]`` (``class``: ``[n_owned, 1]``, multi-label ``[n_owned, T]``)
    """
    if what == "logits":
        return out.reshape(out.shape[0], -1)
    single = out.shape[1] == 1 and not multilabel  # binary: one logit
    if what == "probs":
        return torch.sigmoid(out) if multilabel or single else torch.softmax(out, dim=1)
    if multilabel:
        return (out > 0).to(torch.int64)
    return (out[:, 0] > 0).to(torch.int64)[:, None] if single else out.argmax(dim=1, keepdim=True)


def output_width(graph) -> int:
    """The model's output width on this graph: one logit per label (multi-label), one (binary), one per class."""
    if graph.y.dim() > 1:
        return graph.y.shape[1]
    return 1 if graph.num_classes == 2 else graph.num_classes


def split_metrics(graph, logits: Tensor, metric: str) -> dict[str, float]:
    """``metric`` on the train / val / test masks over every rank, keyed ``train_<metric>`` etc. (collective).

    Count metrics add up statistics over ranks (one all-reduce); ROC-AUC gathers every rank's
    labels and scores of the split and ranks them all (rank order does not matter).

    Shapes:
        logits ``[n_owned, C]``
    """
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    y, grid = graph.y, graph.grid
    if metric == "rocauc":
        score = metrics.scores(logits, y.dim() > 1)
        parts = grid.all_gather_object([(y[m].cpu(), score[m].cpu()) for m in masks])
        values = [metrics.roc_auc(torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts]))
                  for i in range(3)]
    else:
        stats = [metrics.counts(metric, logits[m], y[m], graph.num_classes) for m in masks]
        flat = torch.cat([s.reshape(-1) for s in stats])  # one all-reduce for the three splits
        grid.all_reduce_(flat)
        values = [metrics.from_counts(metric, part.view_as(s))
                  for part, s in zip(flat.split([s.numel() for s in stats]), stats)]
    return {metric_key(split, metric): v for split, v in zip(SPLITS, values)}


def metric_of(cfg, graph) -> str:
    """The run's metric: ``--metric``, else the dataset's own (:func:`gnndist.tasks.metrics.default_metric`)."""
    name = cfg.eval.metric if cfg.eval.metric != "auto" else metrics.default_metric(graph.meta)
    if name not in METRICS:
        raise UserError(f"--metric {name} is a link-prediction metric; a node task is scored by "
                        f"{', '.join(METRICS)}")
    if name == "rocauc" and graph.y.dim() == 1 and graph.num_classes != 2:
        raise UserError(f"--metric rocauc needs a binary or multi-label dataset; {graph.meta.get('dataset')} has "
                        f"{graph.num_classes} classes (use acc, f1-micro or f1-macro)")
    return name
