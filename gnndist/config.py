"""One config tree: a root dataclass of small sections; the CLI flags are derived from it (:mod:`gnndist.flags`).

Each field's ``metadata`` carries its flag help (and choices); validation lives in
``__post_init__`` and its errors name the flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gnndist.cost import NETWORKS
from gnndist.errors import UserError


def opt(default: Any, help: str, choices: tuple | None = None) -> Any:
    """A config field with its CLI help; its flag is its name, ``--name-with-dashes`` (one spelling: no aliases,
    each torchrun-safe, ``tests/test_cli_torchrun.py``)."""
    return field(default=default, metadata={"help": help, "choices": choices})


PRECISIONS = ("fp32", "bf16", "fp16")  # --precision, and the dtype names of --comm-dtype
DEVICES = ("cpu", "cuda")  # simulate --device: the ranks' device, as the memory model knows them
METRICS = ("acc", "rocauc", "f1-micro", "f1-macro")  # --metric of a node task (gnndist.tasks.metrics computes them)
DEFAULT_EDGE_SPLIT = "85,5,10"  # --edge-split of gnndist run --task link on a graph without one (GAE's)
# --metric of a link task, besides hits@K: the names' one home (gnndist.tasks.metrics and gnndist.tasks.link read
# them through parse_link_metric)
LINK_METRICS = ("auc", "mrr")
LINK_METRIC_NAMES = f"{', '.join(LINK_METRICS)} or hits@K"


def parse_link_metric(name: str) -> tuple[str, int | None]:
    """``"auc"`` -> ``("auc", None)``, ``"mrr"`` -> ``("mrr", None)``, ``"hits@50"`` -> ``("hits", 50)``;
    any other name (a node metric among them) is a one-line :class:`UserError`."""
    if name in METRICS:
        raise UserError(f"--metric {name} is a node metric; a link task is scored by {LINK_METRIC_NAMES}")
    kind, at, k = name.partition("@")
    if not at and kind in LINK_METRICS:
        return kind, None
    if kind == "hits" and k.isascii() and k.isdigit() and int(k) >= 1:
        return kind, int(k)
    raise UserError(f"link metric {name!r}: expected {LINK_METRIC_NAMES} with a whole K >= 1 (such as hits@50)")


def _is_link_metric(name: str) -> bool:
    """Whether ``name`` is a link metric (:func:`parse_link_metric`)."""
    try:
        parse_link_metric(name)
    except UserError:
        return False
    return True


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise UserError(msg)


def parse_ints(text: str, flag: str, minimum: int = 1) -> list[int]:
    """A comma-separated list of integers ``>= minimum``, or a :class:`UserError` naming ``flag``."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < minimum for v in values):
        raise UserError(f"{flag} must be a comma-separated list of integers >= {minimum}, got {text!r}")
    return values


@dataclass
class DataConfig:
    root: str | None = opt(None, "dataset root, only read (default $GNNDIST_DATA, else ~/.cache/gnndist)")
    format: str | None = opt(None, "input format of a DATASET path (default: detected)")
    split_seed: int = opt(0, "seed of the 20/30-per-class split of datasets that ship none")
    random_splits: int = opt(0, "store R seeded 20/30-per-class splits (seeds --split-seed ...) in the partition, "
                             "for --splits random (gnndist run sets R to --runs)")
    target: str | None = opt(None, "the labelled node type of a heterogeneous graph (default: the one type with "
                             "labels)")
    edge_split: str | None = opt(None, "store a seeded (--split-seed) random edge split for link prediction, "
                                 "TRAIN,VALID,TEST percentages, e.g. 85,5,10 (GAE's; gnndist run --task link uses "
                                 "it by default): validation and test edges leave the message graph")

    def __post_init__(self) -> None:
        _need(self.random_splits >= 0, f"--random-splits must be >= 0, got {self.random_splits}")
        if self.edge_split is not None:
            from gnndist.datasets.edge_split import parse_edge_split

            parse_edge_split(self.edge_split)  # one line naming --edge-split


@dataclass
class PartitionConfig:
    parts: int = opt(1, "number of parts (= ranks)")
    method: str = opt("auto", "partitioner: auto (every backend that fits; the least halo volume kept unless "
                      "another is modelled faster by more than the cost model's error), METIS, "
                      "KaMinPar (fast, lean at scale), hypergraph (Mt-KaHyPar: the halo volume itself) or random",
                      ("auto", "metis", "kaminpar", "hypergraph", "random"))
    objective: str = opt("vol", "METIS objective: communication volume or edge cut (--balance auto uses cut "
                         "above 2^25 adjacency entries, ~3.7x faster there)", ("vol", "cut"))
    partition_seed: int = opt(0, "partitioner seed")
    balance: str = opt("auto", "balance: auto (the setting of least halo volume, unless another is modelled faster "
                       "by more than the cost model's error), or constraints "
                       "among nodes,edges,train, each optionally :TOLERANCE (e.g. nodes,edges:1.2; KaMinPar and "
                       "hypergraph take one); types: a typed graph's nodes of every type, one constraint each")
    refine: bool = opt(True, "volume-balanced refinement after the partitioner: lowers the busiest rank's halo rows")
    partition_network: str = opt("ib", "cost model of --balance auto and the report's modelled epoch time: a "
                                 "preset, or probe (this machine's constants at --parts ranks, as a --strategy auto "
                                 "run at that many ranks measured and cached them)", (*NETWORKS, "probe"))
    threads: int = opt(0, "partitioner threads (KaMinPar, Mt-KaHyPar): 0 = every core of this process; KaMinPar "
                       "above 1 thread may give other parts run to run (the report says whether the parts repeat)")
    auto_budget: float = opt(4.0, "time budget of auto (method or balance): the candidates' estimated seconds at "
                             "most this many times the cheapest one's (at least 5 s), after a memory budget (no backend"
                             " whose estimated peak is over 2x the leanest's, or 512 MiB); 0 runs every candidate")

    def __post_init__(self) -> None:
        from gnndist.partition import check_budget
        from gnndist.partition.balance import parse_balance

        _need(self.parts >= 1, f"--parts must be >= 1, got {self.parts}")
        parse_balance(self.balance)  # a one-line UserError naming --balance
        check_budget(self.auto_budget)
        _need(self.threads >= 0, f"--threads must be 0 (every core) or a positive count, got {self.threads}")

    @property
    def constraints(self) -> tuple[str, ...]:
        return tuple(c for c in self.balance.split(",") if c)


@dataclass
class SimulateConfig:
    """``gnndist simulate``: the part counts, width and depth, 1.5d replications and network it models."""

    parts: str = opt("4,16,64,256,1024", "comma-separated part counts P")
    feature_dim: int = opt(128, "width F of every layer")
    layers: int = opt(2, "SpMMs per epoch (the model's layers)")
    replication: str = opt("2,4,8", "comma-separated candidate c of the 1.5d layouts")
    network: str = opt("ib", f"cost-model preset: {', '.join(NETWORKS)}")
    alpha: float | None = opt(None, "override the preset's seconds per message")
    beta: float | None = opt(None, "override the preset's bytes per second")
    precision: str = opt("fp32", "arithmetic modelled: fp32, or bf16 / fp16 (activations, halo and send buffers and "
                         "exchanged rows at 2 bytes an element; features, index and weights as in fp32)", PRECISIONS)
    device: str = opt("cpu", "the ranks' device, for the training peak per rank: cpu (resident bytes) or cuda "
                      "(bytes the CUDA allocator hands out)", DEVICES)

    def __post_init__(self) -> None:
        from gnndist.cost import network

        self.part_counts = parse_ints(self.parts, "--parts", 1)
        self.replications = parse_ints(self.replication, "--replication", 2)
        _need(self.precision in PRECISIONS,
              f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        _need(self.device in DEVICES, f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        _need(self.feature_dim >= 1, f"--feature-dim must be >= 1, got {self.feature_dim}")
        _need(self.layers >= 1, f"--layers must be >= 1, got {self.layers}")
        self.net = network(self.network, self.alpha, self.beta)  # an unknown preset: one line naming --network


@dataclass
class DistConfig:
    ranks: int = opt(1, "local ranks to spawn (ignored under torchrun)")
    strategy: str = opt("1d", "distributed aggregation: 1d halo exchange, 1.5d (with --replication), 2d "
                        "(square rank count), auto (per layer, by the cost model)", ("1d", "1.5d", "2d", "auto"))
    replication: int | None = opt(None, "replication c of --strategy 1.5d (divides the rank count)")
    network: str = opt("probe", "cost-model constants of --strategy auto and of the run's modelled epoch: measured "
                       "here, or a preset",
                       ("probe", *NETWORKS))
    alpha: float | None = opt(None, "cost model: seconds per message, overriding --network's")
    beta: float | None = opt(None, "cost model: bytes per second per rank, overriding --network's")
    reprobe: bool = opt(False, "--network probe: measure the constants again, even when this machine's are cached")
    probe_cache: str | None = opt(None, "file of the probe's constants per machine, torch version and world size "
                                  "(default: <data root>/probe.json)")
    timeout: float = opt(600.0, "seconds before a missing peer or collective is an error")
    backend: str = opt("auto", "torch.distributed backend", ("auto", "gloo", "nccl"))
    check_collectives: bool = opt(False, "compare every collective's op, axis and call number across ranks before "
                                  "it runs: a desync is a named error, not a timeout (slower; for debugging)")
    overlap: bool = opt(True, "overlap the halo exchange with interior aggregation")
    comm_dtype: str = opt("auto", "dtype exchanged rows travel in: auto (the dtype of --precision, the rows' own), or "
                          "bf16 under --precision fp32 (half the halo bytes, arithmetic stays fp32)",
                          ("auto", "fp32", "bf16", "fp16"))
    max_restarts: int = opt(0, "restarts of the whole group of --ranks ranks after one fails; with --checkpoint "
                            "they resume from the newest checkpoint (under torchrun: its --max-restarts)")

    def __post_init__(self) -> None:
        _need(self.ranks >= 1, f"--ranks must be >= 1, got {self.ranks}")
        _need(self.timeout > 0, f"--timeout must be > 0, got {self.timeout}")
        _need(self.max_restarts >= 0, f"--max-restarts must be >= 0, got {self.max_restarts}")
        _need(self.alpha is None or self.alpha >= 0, f"--alpha must be >= 0, got {self.alpha}")
        _need(self.beta is None or self.beta > 0, f"--beta must be > 0, got {self.beta}")
        _need(self.strategy == "auto" or (self.alpha is None and self.beta is None),
              "--alpha and --beta set the cost model of --strategy auto")
        _need(self.strategy == "auto" or not (self.reprobe or self.probe_cache),
              "--reprobe and --probe-cache are for the probe of --strategy auto")
        if self.strategy == "1.5d":
            _need(self.replication is not None, "--strategy 1.5d needs --replication C (C divides the rank count)")
        if self.replication is not None:
            _need(self.strategy != "2d", f"--strategy 2d has the square grid of the rank count: drop --replication "
                                         f"{self.replication}")
            _need(self.strategy == "1.5d", f"--replication is for --strategy 1.5d, not {self.strategy}")
            _need(self.replication >= 2, f"--replication must be >= 2, got {self.replication} (1 is --strategy 1d)")


@dataclass
class ModelConfig:
    model: str = opt("gcn", "a registered model's name (gnndist.nn.MODELS: the CLI lists them); its preset sets the "
                     "defaults of the flags not given")
    layers: int = opt(2, "number of GNN layers")
    hidden: int = opt(16, "hidden width")
    dropout: float = opt(0.5, "dropout probability (partition-invariant masks)")
    norm: str = opt("none", "normalisation between layers", ("none", "batch", "layer"))
    num_bases: int = opt(0, "--model rgcn: basis decomposition of each layer's relation weights into this many "
                         "bases (0: a full weight per relation)")
    embedding: str = opt("zero", "--model rgcn: the input rows of featureless node types: zero (no input of their "
                         "own: the first layer gives them their neighbours' mean) or learn (a learnable row per node, "
                         "each rank its own; it overfits few labels: docs/heterogeneous.md); --task link on a graph "
                         "with features: learn appends a learnable row of --hidden to each node's features "
                         "(Refined-GAE's embeddings)", ("zero", "learn"))
    arch: str = opt("plain", "plain: the model's own layers; residual (gcn, sage, gat, gin): input linear, then "
                    "--layers pre-norm residual blocks (norm, layer, GELU, linear) and norm + output linear "
                    "(Platonov et al., ICLR 2023)", ("plain", "residual"))
    bias: bool = opt(True, "a learnable bias in every layer; --no-bias leaves it out (gcn, sage: GAE's encoder has "
                     "none)")
    edge_weights: bool = opt(False, "--model gcn: GCN's normalisation of the weighted adjacency, D_w^-1/2 (A_w + I) "
                             "D_w^-1/2, over the dataset's edge weights (ogbl-collab's, a pair's rows summed as "
                             "OGB's loader gives them); aggregates over the 1D halo (--strategy 1d; auto is 1d)")
    normalize_features: bool = opt(True, "row-normalise input features when none is negative (Kipf & Welling)")
    sparse_features: str = opt("auto", "auto: mostly-zero input features (under 5 %% of the cells nonzero) go to "
                               "a first linear map as a sparse matrix, O(nnz x hidden); on: always; off: dense",
                               ("auto", "on", "off"))
    recompute: bool = opt(False, "activation checkpointing: recompute every block in backward, halo exchanges "
                          "included (gcn2, resgcn)")

    def __post_init__(self) -> None:  # the name is checked against the registry where presets are applied
        _need(self.layers >= 1, f"--layers must be >= 1, got {self.layers}")
        _need(self.hidden >= 1, f"--hidden must be >= 1, got {self.hidden}")
        _need(0.0 <= self.dropout < 1.0, f"--dropout must be in [0, 1), got {self.dropout}")
        _need(self.arch in ("plain", "residual"), f"--arch must be plain or residual, got {self.arch!r}")
        _need(self.sparse_features in ("auto", "on", "off"),
              f"--sparse-features must be auto, on or off, got {self.sparse_features!r}")
        _need(self.num_bases >= 0, f"--num-bases must be >= 0, got {self.num_bases}")
        _need(self.embedding in ("zero", "learn"), f"--embedding must be zero or learn, got {self.embedding!r}")


@dataclass
class OptimConfig:
    epochs: int = opt(200, "training epochs")
    lr: float = opt(0.01, "Adam learning rate")
    weight_decay: float = opt(5e-4, "Adam weight decay")
    clip_grad: float = opt(0.0, "clip the gradients to this global norm, over every rank's parameters "
                           "(torch.nn.utils.clip_grad_norm_'s rule; 0: no clipping)")
    clip_grad_apart: bool = opt(False, "--task link: clip the encoder's gradients, the decoder's and the learned "
                                "rows' to --clip-grad each, apart (Refined-GAE's), not as one global norm")
    lr_decay_every: int = opt(0, "every N epochs from epoch 0, set the learning rate to --lr x max(1 - epoch / "
                              "--epochs, 1e-4) (Refined-GAE's step decay); 0: a constant learning rate")
    precision: str = opt("fp32", "arithmetic of the layers: fp32, or bf16 / fp16 (autocast on the dense layers, "
                         "aggregations on half rows accumulated in fp32, weights and Adam in fp32; fp16 scales "
                         "the loss)", PRECISIONS)
    loss_scale: float = opt(2.0**16, "--precision fp16: the initial loss scale (halved and the step skipped on every "
                            "rank when any rank's gradients overflow, doubled after 100 clean steps)")

    def __post_init__(self) -> None:
        _need(self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}")
        _need(self.lr > 0, f"--lr must be > 0, got {self.lr}")
        _need(self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}")
        _need(self.clip_grad >= 0, f"--clip-grad must be >= 0 (0: no clipping), got {self.clip_grad}")
        _need(not self.clip_grad_apart or self.clip_grad > 0, "--clip-grad-apart clips to --clip-grad NORM: give it")
        _need(self.lr_decay_every >= 0, f"--lr-decay-every must be >= 0 (0: no decay), got {self.lr_decay_every}")
        _need(self.precision in PRECISIONS,
              f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        _need(self.loss_scale >= 1, f"--loss-scale must be >= 1, got {self.loss_scale}")


@dataclass
class KernelConfig:
    kernel: str = opt("auto", "aggregation kernel: auto (chosen per input by capability and measured speed), or "
                      "one forced for every call (the CLI's default: $GNNDIST_KERNEL if set)",
                      ("auto", "reference", "sparse", "triton"))
    spmm_tune: bool = opt(True, "measure the Triton SpMM's tiles on each graph before timing it against the other "
                          "paths (CUDA; the CLI's default: off when $GNNDIST_SPMM_TUNE=0)")


@dataclass
class RunConfig:
    seed: int = opt(0, "training seed (weights and dropout masks)")
    recipe: str = opt("auto", "the recipe under the flags: auto (the dataset family's own, if any), none, or one by "
                      "name from gnndist.presets.RECIPES (amazon, gae, heterophily, ogbl-collab, refined-gae-collab, "
                      "refined-gae-citation2)")
    log_file: str | None = opt(None, "write one JSON line per epoch to this file")
    json: bool = opt(False, "print a JSON summary as the last line of standard output")
    checkpoint: str | None = opt(None, "directory of checkpoints (model, optimiser, epoch, best, RNG) and best.pt")
    checkpoint_every: int = opt(1, "epochs between checkpoints")
    keep_checkpoints: int = opt(3, "checkpoints kept in --checkpoint (the newest)")
    resume: bool = opt(False, "resume from the newest good checkpoint in --checkpoint")
    progress: bool = opt(True, "progress bar on rank 0")
    profile: bool = opt(False, "synchronise the device at every timed phase, so the per-epoch time breakdown "
                               "(aggregation, dense, comm, other) is exact on CUDA (slower there; no cost on CPU)")

    def __post_init__(self) -> None:
        _need(self.checkpoint_every >= 1, f"--checkpoint-every must be >= 1, got {self.checkpoint_every}")
        _need(self.keep_checkpoints >= 1, f"--keep-checkpoints must be >= 1, got {self.keep_checkpoints}")


@dataclass
class EvalConfig:
    metric: str = opt("auto", "metric of model selection and of the report: auto (the dataset's own, as its spec "
                      "declares; auc (and ap) for a random edge split; rocauc for multi-label labels; else acc), "
                      f"{', '.join(METRICS)}; link: {LINK_METRIC_NAMES}")
    split: int | None = opt(None, "train on shipped split K of a dataset that ships several (heterophily: 0..9; "
                            "default 0)")
    splits: str = opt("one", "one: every run on one split (--split K, or the --split-seed random split); all: one "
                      "run per shipped split; random: run r on the random split of seed --split-seed + r (Shchur "
                      "et al.)", ("one", "all", "random"))
    runs: int = opt(1, "runs, run r with seed --seed + r (and its split, with --splits all|random): each run and "
                    "mean ± std are reported")
    patience: int | None = opt(None, "stop a run when the validation metric has not improved for this many epochs")

    def __post_init__(self) -> None:
        _need(self.metric == "auto" or self.metric in METRICS or _is_link_metric(self.metric),
              f"unknown --metric {self.metric!r}; known: auto, {', '.join(METRICS)}, {LINK_METRIC_NAMES}")
        _need(self.runs >= 1, f"--runs must be >= 1, got {self.runs}")
        _need(self.split is None or self.split >= 0, f"--split must be >= 0, got {self.split}")
        _need(self.split is None or self.splits == "one",
              f"--split {self.split} picks one split; --splits {self.splits} runs several: give one of them")
        _need(self.patience is None or self.patience >= 1, f"--patience must be >= 1, got {self.patience}")


@dataclass
class TaskConfig:
    task: str = opt("auto", "what to learn: a registered task (gnndist.tasks.TASKS: the CLI lists them), or auto "
                    "(link where the partition holds an edge split: a link dataset's own, or --edge-split's; else "
                    "node)")
    decoder: str = opt("auto", "--task link: the edge decoder: dot (GAE's inner product), mlp (OGB's "
                       "LinkPredictor: Hadamard product, 3-layer MLP), mlp-norm (the same with a LayerNorm before each "
                       "ReLU: Refined-GAE's citation2 decoder) or mlp-res (Refined-GAE's collab decoder: the "
                       "product's LayerNorm, blocks with LayerNorm each adding it back); auto: mlp on an OGB split, "
                       "else dot", ("auto", "dot", "mlp", "mlp-norm", "mlp-res"))
    edge_batch: int = opt(0, "--task link: training positives per optimisation step, each step one encoder pass "
                          "(0: every positive, one step an epoch)")
    out_dim: int = opt(0, "--task link: the width of the encoder's output rows, which the decoder reads (0: --hidden)")
    decoder_layers: int = opt(3, "--task link, --decoder mlp|mlp-norm|mlp-res: the decoder's linear layers (OGB's "
                              "LinkPredictor: 3)")
    negatives: int = opt(1, "--task link: training negatives per positive, global uniform node pairs hashed from "
                         "(seed, epoch, the positive's index): the same on any P")
    use_valedges_as_input: bool = opt(False, "--task link: score the test split with the encoder run over the "
                                      "training and validation edges (OGB collab's test-time protocol); training, "
                                      "validation and model selection stay on the training edges. The partition "
                                      "stores that second message graph: gnndist run makes it, gnndist partition "
                                      "stores it with this flag")

    def __post_init__(self) -> None:
        _need(self.edge_batch >= 0, f"--edge-batch must be >= 0 (0: every positive), got {self.edge_batch}")
        _need(self.out_dim >= 0, f"--out-dim must be >= 0 (0: --hidden), got {self.out_dim}")
        _need(self.negatives >= 1, f"--negatives must be >= 1, got {self.negatives}")
        _need(self.decoder_layers >= 1, f"--decoder-layers must be >= 1, got {self.decoder_layers}")
        _need(not (self.use_valedges_as_input and self.task == "node"),
              "--use-valedges-as-input is for link prediction (--task link), not --task node")


@dataclass
class TrainConfig:
    """Root of the training config tree (``gnndist train`` / ``gnndist run``)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    kernel: KernelConfig = field(default_factory=KernelConfig)
    run: RunConfig = field(default_factory=RunConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    task: TaskConfig = field(default_factory=TaskConfig)

    def __post_init__(self) -> None:
        _need(not self.run.resume or self.run.checkpoint, "--resume needs --checkpoint DIR")
        m, strategy = self.model, self.dist.strategy
        _need(not m.edge_weights or m.model == "gcn", f"--edge-weights (the ogbl-collab recipe's; --no-edge-weights "
              f"leaves them out) weighs GCN's normalisation: --model gcn, not --model {m.model}")
        _need(not m.edge_weights or strategy in ("1d", "auto"), f"--edge-weights aggregates over the 1D halo: "
              f"--strategy 1d (or auto), not --strategy {strategy}")
        _ = self.wire_dtype  # a --comm-dtype that does not go with --precision: one line naming both

    @property
    def wire_dtype(self) -> str:
        """The dtype exchanged rows travel in, by name: ``--comm-dtype``, where ``auto`` is ``--precision``'s.

        One mechanism: under ``--precision bf16|fp16`` the rows are in that dtype already (the aggregation's
        input is cast to the autocast dtype), so they travel as they are; under fp32 ``--comm-dtype bf16``
        rounds them for the wire only. A wire wider than the rows (``fp32`` under half precision) would
        move bytes that carry nothing, and fp16 rows of fp32 arithmetic overflow above 65504: both are refused.
        """
        comm, prec = self.dist.comm_dtype, self.optim.precision
        if comm == "auto" or comm == prec:
            return prec
        _need(prec == "fp32", f"--comm-dtype {comm} with --precision {prec}: the exchanged rows are {prec} already "
                              f"(drop --comm-dtype, or give --comm-dtype {prec})")
        _need(comm == "bf16", "--comm-dtype fp16 with --precision fp32: fp32 rows above 65504 would overflow on the "
                              "wire; use --comm-dtype bf16")
        return comm

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """The config of :meth:`to_dict` (keys that are not sections, e.g. a checkpoint's widths, are ignored;
        a checkpoint written before the fields took their flags' names holds :data:`FORMER_NAMES`)."""
        return cls(**{name: TRAIN_SECTIONS[name](**{FORMER_NAMES.get(name, {}).get(k, k): v for k, v in sub.items()})
                      for name, sub in d.items() if name in TRAIN_SECTIONS})


# section -> {a field's name in checkpoints written before issue 37: its name now, its flag's}
FORMER_NAMES = {"dist": {"nproc": "ranks"}, "run": {"log": "log_file"}}

Preset = Callable[["TrainConfig"], "TrainConfig"]  # a function returning a config (gnndist.presets)

TRAIN_SECTIONS = {"model": ModelConfig, "optim": OptimConfig, "dist": DistConfig, "kernel": KernelConfig,
                  "run": RunConfig, "eval": EvalConfig, "task": TaskConfig}


def with_fields(cfg: TrainConfig, **sections: dict[str, Any]) -> TrainConfig:
    """A copy of ``cfg`` with the given fields of the given sections replaced (validated like flags), e.g.
    ``with_fields(cfg, model={"hidden": 64}, optim={"lr": 0.005})``."""
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **fields)
                                       for name, fields in sections.items()})
