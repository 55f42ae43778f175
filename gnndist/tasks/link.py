"""Link prediction, full-graph and exact on P ranks: an encoder pass, then the pairs' rows from their owners.

A step: the encoder computes every owned node's row (one pass over the message graph: training edges
only); the step's positive pairs and their negatives name rows anywhere, which come from their owners in
one exchange (:func:`gnndist.tasks.pairs.fetch_rows`; their gradients go back the same way); the decoder
scores each pair; the loss is OGB's and GAE's, ``mean softplus(-pos) + mean softplus(neg)``, each rank
adding its pairs' terms over the *global* counts. No rank gathers the embedding table.

What does not depend on P:

* which rank holds a pair: part ``k`` stores slice ``k`` of each pair array (:mod:`gnndist.partition.link`);
  a pair's global index is its position in the split;
* training negatives: ``--negatives K`` per positive (one by default), global uniform node pairs (``corrupt``: the
  positive's source with a uniform destination, citation2's) from a hash of (seed, epoch, the positive's global
  index, j < K), in dataset ids;
* ``--edge-batch B``: positive ``i`` belongs to step ``hash(seed, epoch, i) mod S`` of the ``S = ceil(E / B)``
  steps of an epoch (about ``B`` each), so one process and P ranks make the same steps.

``--use-valedges-as-input`` (OGB collab's test-time protocol): the test split is scored with the rows of a second
encoder pass, the same weights over the message graph of training *and* validation edges, which the partition
stores as the sub-partition ``valedges`` over the same owners (:mod:`gnndist.partition.link`); training, the train
and validation metrics and model selection stay on the training edges.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor, nn

from gnndist.config import TaskConfig
from gnndist.errors import UserError
from gnndist.files import drop_mapped
from gnndist.kernels.dropout.reference import hash_bits
from gnndist.nn.models.link import LinkModel, decoder
from gnndist.nn.node_embedding import NodeEmbedding
from gnndist.partition.components import LINK_SPLIT
from gnndist.partition.link import VALEDGES, pair_slice
from gnndist.strategies import strategy_from_config
from gnndist.tasks import metrics
from gnndist.tasks.base import Placed, Task, register_task
from gnndist.tasks.metrics import SPLITS, metric_key
from gnndist.tasks.pairs import Directory, Fetched, fetch_distinct
from gnndist.tasks.scoring import Locate, decode, pair_loss

NEGATIVE_KEY = 0x4E454721  # the hash stream of training negatives (apart from dropout's and embeddings')
BATCH_KEY = 0x42415443  # the hash stream of --edge-batch's step of each positive
TRAIN_EVAL_KEY = 0x54524E45  # the hash stream of the train metric's per-positive negatives (fixed: every epoch alike)
NEGATIVE_BLOCK = 2**20  # positives whose negatives are hashed at once
TRAIN_SUBSET_KEY = 0x54535542  # the hash stream of the train metric's positives (fixed: every epoch alike)
LINK_FIX = "gnndist partition DATASET --edge-split 85,5,10 stores a seeded random edge split (gnndist run DATASET " \
           "--task link makes one)"
def valedges_graph(graph, dist):
    """``graph``'s rows over its partition's message graph of training + validation edges (OGB collab's test-time
    input), aggregated by ``dist``'s ``--strategy``; a partition without it: one line."""
    if VALEDGES not in graph.meta.get("inner", {}):
        raise UserError(f"--use-valedges-as-input: the partition of {graph.meta.get('dataset')} stores no message "
                        f"graph of training + validation edges; {VALEDGES_FIX}")
    return graph.sub_partition(VALEDGES, strategy_from_config(dist))


VALEDGES_FIX = "gnndist partition DATASET --use-valedges-as-input stores it (gnndist run DATASET " \
               "--use-valedges-as-input makes it)"


def uniform_nodes(ids: Tensor, width: int, num_nodes: int, seed: int, epoch: int, key: int) -> Tensor:
    """``width`` uniform node ids in ``[0, num_nodes)`` per global index in ``ids``, from a hash (any rank alike).

    Shapes:
        ids ``[n]`` int64 -> ``[n, width]`` int64
    """
    return (hash_bits(ids, width, seed, epoch, key).long() * num_nodes) >> 31


def train_eval_subset(index: Tensor, e_train: int, e_val: int, seed: int) -> Tensor:
    """Which training positives (by global index) the train metric scores: each with probability
    ``E_val / E_train`` from a hash of its index, so about ``E_val`` of them, spread over the split, the same at any P.

    Shapes:
        index ``[n]`` int64 -> ``[n]`` bool
    """
    return uniform_nodes(index, 1, e_train, seed, 0, TRAIN_SUBSET_KEY)[:, 0] < e_val  # a uniform draw in [0, E_train)


def read_pairs(path: str, rank: int, parts: int) -> np.ndarray:
    """Slice ``rank`` of ``parts`` of the node pairs in ``path`` (a ``.npy`` of ``[n, 2]`` integer dataset ids),
    memory-mapped: no rank reads them all. ``[n_rank, 2]`` int64."""
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise UserError(f"--pairs {path}: not a readable .npy file ({e})") from None
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iu":
        raise UserError(f"--pairs {path}: need an [n, 2] array of integer node ids, got {arr.dtype} {list(arr.shape)}")
    lo, hi = pair_slice(arr.shape[0], rank, parts)
    return np.ascontiguousarray(arr[lo:hi], dtype=np.int64)


@register_task
class LinkTask(Task):
    """Predict the edges of a split: positives and negatives of the partition's edge split (META.json's ``link``).

    Args:
        graph: this rank's :class:`~gnndist.graph.DistGraph` (its ``link`` arrays).
        cfg: the training config (``--decoder``, ``--edge-batch``, ``--out-dim``, ``--metric``, ``--seed``,
            ``--use-valedges-as-input``).

    Attributes:
        test_graph: the graph the test split's rows are computed on: ``graph``, or with ``--use-valedges-as-input``
            its sub-partition of training + validation edges (built here, on every rank at once).
    """

    name = "link"
    noun = "a link predictor"
    parts = (LINK_SPLIT,)  # this part's slice of every pair array and of the id directory; META.json's "link"
    outputs = ("embedding", "scores")  # its encoder's rows; the probability of each of --pairs

    def __init__(self, graph, cfg):
        if graph.link is None:
            raise UserError(f"--task link: the partition of {graph.meta.get('dataset')} has no edge split; {LINK_FIX}")
        self.graph, self.grid, self.cfg = graph, graph.grid, cfg
        split = graph.meta["link"]
        self.metric = link_metric(cfg.eval.metric, split["metric"])
        self.metrics = (self.metric, "ap") if self.metric == "auc" else (self.metric,)  # the first selects
        counts = {k: v[0] for k, v in split["counts"].items()}
        self.per_positive = split["metric"] == "mrr"  # negatives [n, K] destinations per positive (citation2)
        _check_counts(split["counts"], self.per_positive, graph.meta.get("dataset"))
        self.counts = counts
        self.num_nodes = graph.num_nodes
        self.offsets = torch.tensor(graph.meta["offsets"], dtype=torch.int64, device=self.grid.device)
        self.directory = Directory(graph.link["home"], self.num_nodes, self.grid)
        new = self.directory.new_ids
        self.pairs = {name: new(graph.link[name], f"the {name} pairs")
                      for name in ("train", "valid", "test", "valid_neg", "test_neg")}  # new ids, this rank's slice
        for t in graph.link.values():  # read once for the new ids: their mapped pages need not stay resident
            if t.device.type == "cpu":
                drop_mapped(t.data_ptr(), t.numel() * t.element_size())
        self.first = {name: pair_slice(counts[name], self.grid.rank, self.grid.world_size)[0] for name in counts}
        # no features of its own (ogbl-ddi's none; SNAP's made from the structure): every node learns its input row
        self.featureless = graph.x.shape[1] == 0 or bool(graph.meta.get("featureless"))
        e = counts["train"]
        self.batch = cfg.task.edge_batch or e
        self.num_steps = -(-e // self.batch)
        self.step_counts: dict[int, Tensor] = {}  # epoch -> [S] global positives of each step
        self.test_graph = self._test_graph(graph, cfg)

    @staticmethod
    def _test_graph(graph, cfg):
        """``graph``, or with ``--use-valedges-as-input`` :func:`valedges_graph`."""
        return valedges_graph(graph, cfg.dist) if cfg.task.use_valedges_as_input else graph

    # ------------------------------------------------------------------ the model
    def resolved(self, cfg):
        """``cfg`` with ``--task link`` and the decoder it trains (:attr:`decoder`)."""
        return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, task="link", decoder=self.decoder))

    @property
    def rows_beside(self) -> bool:
        """``--embedding learn`` on a graph with features: a learned row of ``--hidden`` beside each feature row."""
        return not self.featureless and self.cfg.model.embedding == "learn"

    def widths(self, hidden: int) -> tuple[int, int]:
        """The encoder's input width (the features', ``hidden`` for learned rows, the sum for learned rows beside
        the features) and output width (``--out-dim``, else ``hidden``)."""
        f_in = hidden if self.featureless else self.graph.x.shape[1] + (hidden if self.rows_beside else 0)
        return f_in, self.cfg.task.out_dim or hidden

    def wrap(self, encoder: nn.Module, cfg, seed: int) -> nn.Module:
        """The model trained: ``encoder`` with ``--decoder`` (and learned input rows on a featureless graph, or beside
        the features with ``--embedding learn``); a
        :class:`~gnndist.nn.LinkModel` handed in is the user's own encoder and decoder, trained as it is."""
        if isinstance(encoder, LinkModel):
            return encoder
        f_in, f_out = self.widths(cfg.model.hidden)
        if self.featureless:
            embedding = NodeEmbedding(self.graph, f_in, seed)
        elif self.rows_beside:
            embedding = NodeEmbedding(self.graph, cfg.model.hidden, seed, beside=True)
        else:
            embedding = None
        layers = cfg.task.decoder_layers
        if self.decoder == "dot" and layers != TaskConfig.decoder_layers:
            raise UserError(f"--decoder-layers {layers} is for an MLP decoder (mlp, mlp-norm, mlp-res); this run's "
                            "decoder is dot")
        return LinkModel(encoder, decoder(self.decoder, f_out, layers), embedding)

    @property
    def decoder(self) -> str:
        """``--decoder``; by default OGB's MLP on its datasets, GAE's inner product on a random split."""
        given = self.cfg.task.decoder
        return given if given != "auto" else ("mlp" if self.graph.meta["link"]["kind"] == "ogb" else "dot")

    def encoder(self, model: nn.Module) -> nn.Module:
        """The encoder of the model trained (its representation layers are the encoder's)."""
        return model.encoder

    # ------------------------------------------------------------------ training
    def steps(self, epoch: int) -> int:
        """Optimisation steps of an epoch: ``ceil(E_train / --edge-batch)`` (one with every positive by default)."""
        return self.num_steps

    def _step(self, epoch: int, step: int) -> tuple[Tensor, Tensor | None]:
        """The global count of positives in step ``step`` of ``epoch`` and this rank's positives in it (their local
        indices; None: every one, the whole epoch in one step)."""
        if self.num_steps == 1:
            return torch.tensor(float(max(self.counts["train"], 1)), dtype=torch.float64), None
        n = self.pairs["train"].shape[0]
        ids = torch.arange(self.first["train"], self.first["train"] + n, device=self.grid.device)
        of = uniform_nodes(ids, 1, self.num_steps, self.cfg.run.seed, epoch, BATCH_KEY)[:, 0]  # [n] each one's step
        if epoch not in self.step_counts:
            self.step_counts = {epoch: self.grid.all_reduce_(torch.bincount(of, minlength=self.num_steps).double())}
        return self.step_counts[epoch][step].clamp(min=1), (of == step).nonzero().view(-1)

    def loss(self, model: nn.Module, epoch: int, step: int) -> Tensor:
        """This rank's share of the global loss of step ``step``: its positives of the step and their negatives,
        scored a block of pairs at a time (:func:`~gnndist.tasks.scoring.pair_loss`)."""
        g = self.graph
        total, chosen = self._step(epoch, step)
        pos = self.pairs["train"] if chosen is None else self.pairs["train"][chosen]  # [n, 2] new ids
        neg = self._negatives(pos, chosen, epoch)  # [n K, 2] new ids
        h = model(g, g.x)  # [n_owned, d]
        rows, locate = self._rows(h, pos, neg)
        # each mean over its global count: of positives, and of K x as many negatives
        return pair_loss(model.decoder, rows, locate, pos, neg, self.cfg.task.negatives, total)

    def _negatives(self, pos: Tensor, chosen: Tensor | None, epoch: int) -> Tensor:
        """``--negatives K`` negatives of each positive (new ids), from a hash of its global index, drawn a block of
        positives at a time (the hash's int64 temporaries stay a block's); their dataset ids become new ids in one
        exchange (collective).

        Shapes:
            pos ``[n, 2]``; chosen ``[n]`` local indices or None (``arange(n)``) -> ``[n K, 2]`` int64
        """
        k, seed, n = self.cfg.task.negatives, self.cfg.run.seed, pos.shape[0]
        width = k if self.per_positive else 2 * k  # citation2: a destination per negative; else both endpoints
        drawn = torch.empty(n, width, dtype=torch.int64, device=pos.device)
        for lo in range(0, n, NEGATIVE_BLOCK):
            hi = min(n, lo + NEGATIVE_BLOCK)
            index = (torch.arange(lo, hi, device=pos.device) if chosen is None else chosen[lo:hi]) + self.first["train"]
            drawn[lo:hi] = uniform_nodes(index, width, self.num_nodes, seed, epoch, NEGATIVE_KEY)
        new = self.directory.new_ids(drawn.view(-1, 1 if self.per_positive else 2), counter=self.graph.context.counter)
        if self.per_positive:  # corrupt the destination: [n K, 1] destinations beside their positive's source
            return torch.cat([pos[:, :1].repeat_interleave(k, dim=0), new], dim=1)
        return new

    def _rows(self, h: Tensor, *pairs: Tensor) -> tuple[Fetched, Locate]:
        """The distinct rows that ``pairs`` (new ids) name, those of other ranks from their owners (collective) and
        this rank's read in ``h``, and new ids -> their positions among them.

        Shapes:
            h ``[n_owned, d]``; each of pairs ``[n, 2]`` -> far rows ``[n_far, d]`` beside ``h``
        """
        return fetch_distinct(h, pairs, self.num_nodes, self.offsets, self.grid, self.graph.context.counter, "pairs")

    @torch.no_grad()
    def scores(self, model: nn.Module, h: Tensor, pairs: Tensor) -> Tensor:
        """The decoder's logit of each pair (new ids), its rows from their owners (collective), a block of pairs at a
        time.

        Shapes:
            h ``[n_owned, d]``; pairs ``[n, 2]`` -> ``[n]`` float32
        """
        return decode(model.decoder, *self._rows(h, pairs), pairs)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module, autocast) -> dict[str, float]:
        """The metric on train / val / test over every rank, keyed ``val_hits@50`` etc. (AUC: AP beside it).

        Validation and test positives are scored against their split's negatives; the train value scores a hashed
        random subset of about ``E_val`` training positives against the validation negatives (OGB's practice).
        The test split's rows are :meth:`rows` of :attr:`test_graph` (``--use-valedges-as-input``: a second pass).
        """
        h = self.rows(model, self.graph, autocast)
        out = {}
        for split, (pos, neg) in zip(SPLITS, (self._train_eval(), ("valid", "valid_neg"), ("test", "test_neg"))):
            if split == "test" and self.test_graph is not self.graph:
                del h  # one pass's rows alive at a time
                h = self.rows(model, self.test_graph, autocast)
            p, n = (self.pairs[pos], self.pairs[neg]) if isinstance(pos, str) else (pos, neg)
            values = self._metrics(model, h, p, n)
            out.update({metric_key(split, k): v for k, v in values.items()})
        return out

    @staticmethod
    def rows(model: nn.Module, graph, autocast) -> Tensor:
        """The encoder's row of every owned node over ``graph``'s message graph (collective). ``[n_owned, d]``"""
        with autocast():
            return model(graph, graph.x)

    def _train_eval(self) -> tuple[Tensor, Tensor]:
        """The train metric's positives and negatives (the validation negatives, or hashed destinations per positive).

        The positives are a random subset of about ``E_val`` of them (OGB's examples: ``randperm(E_train)[:E_val]``),
        each kept by a hash of its global index: the same subset at any P; never the first ``E_val`` of the split,
        which a split ordered by time or by node would bias."""
        pos = self.pairs["train"]
        index = torch.arange(pos.shape[0], device=pos.device) + self.first["train"]  # [n] global indices
        keep = train_eval_subset(index, self.counts["train"], self.counts["valid"], self.cfg.run.seed)
        pos, index = pos[keep], index[keep]
        if not self.per_positive:
            return pos, self.pairs["valid_neg"]
        k = self.pairs["valid_neg"].shape[1]
        dst = uniform_nodes(index, k, self.num_nodes, self.cfg.run.seed, 0, TRAIN_EVAL_KEY)
        return pos, self.directory.new_ids(dst)

    def _metrics(self, model: nn.Module, h: Tensor, pos: Tensor, neg: Tensor) -> dict[str, float]:
        n = pos.shape[0]
        if self.per_positive:  # neg [n, K] destinations of each positive's source
            k = neg.shape[1]
            pairs = torch.stack([pos[:, :1].expand(n, k), neg], dim=2).reshape(-1, 2)
            score = self.scores(model, h, torch.cat([pos, pairs]))
            return metrics.link_metrics(self.metric, score[:n], score[n:].view(n, k), self.grid)
        score = self.scores(model, h, torch.cat([pos, neg]))
        return metrics.link_metrics(self.metric, score[:n], score[n:], self.grid)

    # ------------------------------------------------------------------ gnndist predict
    def check_output(self, what: str, layer: int | None = None, valedges: bool = False) -> None:
        """:meth:`Task.check_output <gnndist.tasks.base.Task.check_output>`; ``--use-valedges-as-input`` is its."""
        super().check_output(what, layer)

    def predict_graph(self, graph, dist, valedges: bool = False):
        """``graph``, or with ``--use-valedges-as-input`` :func:`valedges_graph` (aggregated by ``dist``'s layout)."""
        return valedges_graph(graph, dist) if valedges else graph

    @torch.no_grad()
    def predicted(self, model: nn.Module, out: Tensor, what: str, pairs: str | None = None) -> Tensor | Placed:
        """``embedding``: the encoder's rows; ``scores``: the probability of each of this rank's slice of the pairs
        in ``pairs`` (``[n_rank, 1]``), at their positions (collective: rows come from their owners)."""
        if what != "scores":
            return super().predicted(model, out, what)
        grid = self.grid
        new = self.directory.new_ids(torch.from_numpy(read_pairs(pairs, grid.rank, grid.world_size)).to(grid.device),
                                     f"--pairs {pairs}")
        prob = torch.sigmoid(self.scores(model, out, new)).cpu()[:, None]  # [n_rank, 1]
        total = int(np.load(pairs, mmap_mode="r").shape[0])
        lo, hi = pair_slice(total, grid.rank, grid.world_size)
        return Placed(prob, np.arange(lo, hi), total)


def link_metric(given: str, stored: str) -> str:
    """The link task's metric: ``--metric`` when it names one (:func:`gnndist.config.parse_link_metric`), else the
    split's."""
    if given == "auto":
        return stored
    kind, _ = metrics.parse_link_metric(given)  # a node metric, or no metric: one line
    if (kind == "mrr") != (stored == "mrr"):
        raise UserError(f"--metric {given}: this split's negatives are "
                        f"{'per positive (MRR)' if stored == 'mrr' else 'shared (AUC, Hits@K)'}")
    return given


def _check_counts(counts: dict, per_positive: bool, name: str | None) -> None:
    """One line for a split that cannot train or be scored: no positives, negatives of the wrong shape."""
    for split in ("train", "valid", "test"):
        if counts[split][0] == 0:
            raise UserError(f"{name}: the edge split has no {split} positives; {LINK_FIX} with a nonzero share")
    for split in ("valid", "test"):
        neg = counts[f"{split}_neg"]
        if per_positive and (len(neg) != 2 or neg[0] != counts[split][0]):
            raise UserError(f"{name}: {split} negatives of shape {neg}: MRR needs [{counts[split][0]}, K], "
                            f"K destinations per positive")
        if not per_positive and (len(neg) != 2 or neg[1] != 2 or neg[0] == 0):
            raise UserError(f"{name}: {split} negatives of shape {neg}: need [M, 2] node pairs, M >= 1")
