"""Presets: a dataset family's recipe, then the model's, then the flags given.

    cfg = compose(given_flags(args), dataset="amazon-photo")  # defaults < recipe < model preset < flags

A dataset family's recipe is a :data:`Preset` ``(TrainConfig) -> TrainConfig`` in :data:`RECIPES`, by name: a
dataset's spec names its family's recipe for each task (:class:`gnndist.datasets.spec.DatasetSpec`, ``recipes``). A
model's preset is data, config fields by section, registered with the model (:func:`gnndist.nn.register_model`,
the one registry: its spec in :data:`gnndist.nn.models.MODELS`, where the built-in models' are too) and applied
here with :func:`~gnndist.config.with_fields`, so ``gnndist.nn`` does not import the config.
"""

from __future__ import annotations

from typing import Any

from gnndist.config import TRAIN_SECTIONS, Preset, TrainConfig, with_fields
from gnndist.datasets.spec import dataset_spec
from gnndist.errors import UserError


def amazon(cfg: TrainConfig) -> TrainConfig:
    """Amazon co-purchase graphs (Shchur et al. 2018) have binary bag-of-words features: row-normalised, with
    hidden 16, a GCN had not converged after 200 epochs (Photo 60.4 +- 6.3); raw features and hidden 64 reach
    90.2 +- 2.0 (benchmarks/README.md, "Accuracy")."""
    return with_fields(cfg, model={"hidden": 64, "normalize_features": False})


def heterophily(cfg: TrainConfig) -> TrainConfig:
    """The heterophily benchmark's classic GNNs (Platonov et al., ICLR 2023, https://arxiv.org/abs/2302.11640).

    Their ``train.py``: residual blocks with layer norm and GELU between input and output linear layers
    (``--arch residual``), 5 blocks of 512 (the paper tunes 1..5 on validation), dropout 0.2, AdamW at
    lr 3e-5 without weight decay (Adam here: the same update at zero decay), 1000 full-graph steps, the step
    of best validation metric, raw features; every one of the 10 shipped splits (``--splits all``), the
    dataset's metric (ROC-AUC for minesweeper, tolokers, questions; accuracy otherwise).
    """
    return with_fields(cfg, model={"arch": "residual", "layers": 5, "hidden": 512, "dropout": 0.2, "norm": "layer",
                                   "normalize_features": False},
                       optim={"lr": 3e-5, "weight_decay": 0.0, "epochs": 1000}, eval={"splits": "all"})


def gae(cfg: TrainConfig) -> TrainConfig:
    """GAE on the Planetoid citation graphs (Kipf & Welling, NIPS workshop 2016, https://arxiv.org/abs/1611.07308):
    a 2-layer GCN of 32 then 16 units, the inner-product decoder, Adam at lr 0.01 without weight decay or dropout,
    200 epochs, an 85 / 5 / 10 edge split, the binary features as they are (``tkipf/gae`` does not row-normalise
    them), layers without bias (``tkipf/gae``'s ``GraphConvolution`` has none); test ROC-AUC and AP (their Cora:
    91.0 / 92.0; here, 10 runs: 90.5 / 91.5, docs/link_prediction.md)."""
    return with_fields(cfg, model={"model": "gcn", "layers": 2, "hidden": 32, "dropout": 0.0,
                                   "normalize_features": False, "bias": False},
                       optim={"lr": 0.01, "weight_decay": 0.0, "epochs": 200}, task={"out_dim": 16, "decoder": "dot"})


def ogbl_collab(cfg: TrainConfig) -> TrainConfig:
    """OGB's full-batch ogbl-collab baseline (``examples/linkproppred/collab/gnn.py``): a 3-layer GCN of 256 over the
    edge weights (``--edge-weights``: OGB's ``adj_t`` holds them), the 3-layer MLP LinkPredictor, no dropout, Adam
    at lr 0.001, 400 epochs; a step every 8,192 positives, each step one encoder pass (OGB's example steps every
    65,536: ``--edge-batch 65536``; ``--edge-batch 0`` makes an epoch one step). Measured on an ogbl-collab-layout
    copy of Coauthor CS (70k training positives, 2 ranks,
    ``benchmarks/link_reference.py``, benchmarks/README.md "Time to Hits@50 against --edge-batch"): validation
    Hits@50 53.8 % in 43 s at 8,192 against 105 s at 65,536 and never in 40 epochs at one step an epoch.

    Without ``--use-valedges-as-input``, as OGB's baseline (GCN 44.75 Hits@50) was measured; the leaderboard's
    entries that add the validation edges to the test-time message graph (the example's ``--use_valedges_as_input``)
    are that flag, given on top of the recipe (docs/link_prediction.md)."""
    return with_fields(cfg, model={"model": "gcn", "layers": 3, "hidden": 256, "dropout": 0.0, "edge_weights": True},
                       optim={"lr": 0.001, "weight_decay": 0.0, "epochs": 400},
                       task={"decoder": "mlp", "edge_batch": 8192})


def refined_gae_collab(cfg: TrainConfig) -> TrainConfig:
    """Refined-GAE's ogbl-collab command (Ma et al., "Reconsidering the performance of GAE in link prediction",
    CIKM 2025; ``GraphPKU/Refined-GAE``'s ReadMe, ``collab.py`` and ``model.py``), as gnndist has its pieces:
    ``--model propgcn`` (a GCN layer into 1024, then one shared GCN layer propagated 3 more times, each after
    LayerNorm and dropout 0.2, no ReLU), ``--decoder mlp-res`` of 5 linear layers (the Hadamard product's
    LayerNorm, blocks with LayerNorm and ReLU each adding that product back), 3 global uniform negatives per
    positive, a step (one encoder pass) every 16,384 positives, Adam at lr 0.0004 without weight decay, 500
    epochs, the learning rate decayed every 100 epochs (their ``adjustlr``), the encoder's and the decoder's
    gradients clipped to 1.0 apart; the graph unweighted (their run without
    ``--use_valid_as_input``). Their leaderboard entry adds the validation edges as input (Hits@50 0.6816).

    Not theirs here: dropout between the decoder's blocks (not offered: masks over pairs), training positives of
    year >= 2011 only (their ``collab.py`` filters the years; gnndist trains on every training edge), and DGL's
    ``GraphConv`` normalising by unweighted degrees on a weighted graph (docs/link_prediction.md)."""
    return with_fields(cfg, model={"model": "propgcn", "layers": 4, "hidden": 1024, "dropout": 0.2, "norm": "layer",
                                   "edge_weights": False},
                       optim={"lr": 4e-4, "weight_decay": 0.0, "epochs": 500, "clip_grad": 1.0,
                              "clip_grad_apart": True, "lr_decay_every": 100},
                       task={"decoder": "mlp-res", "decoder_layers": 5, "negatives": 3, "edge_batch": 16384})


def refined_gae_citation2(cfg: TrainConfig) -> TrainConfig:
    """Refined-GAE's ogbl-citation2 command (``GraphPKU/Refined-GAE``'s ReadMe: ``citation.py --lr 0.0003
    --clip_norm 1 --emb_hidden 256 --hidden 256 --batch_size 65536 --dropout 0.2 --num_neg 3 --epochs 200
    --prop_step 3 --norm --dp4norm 0.2 --mlp_layers 5``; MRR 88.74 +- 0.06 in their ReadMe's table), as gnndist has its
    pieces: ``--model propgcn`` (a GCN layer into 256, then one shared GCN layer propagated twice more, each after
    LayerNorm and dropout 0.2), a learned row of 256 beside every node's features (``--embedding learn``), ``--decoder
    mlp-norm`` of 5 linear layers (LayerNorm before each ReLU, no residual), 3 global uniform negatives per
    positive, a step every 65,536 positives, Adam at lr 0.0003 without weight decay, 200 epochs, the learning rate
    decayed every 100 epochs, the encoder's, the decoder's and the rows' gradients clipped to 1.0 apart.

    Not theirs here: the rows' orthogonal initialisation (a QR of the whole table, which no rank holds: gnndist's
    rows are hashed per node, P-invariant), and the decoder's dropout between blocks (masks over pairs)."""
    return with_fields(cfg, model={"model": "propgcn", "layers": 3, "hidden": 256, "dropout": 0.2, "norm": "layer",
                                   "embedding": "learn"},
                       optim={"lr": 3e-4, "weight_decay": 0.0, "epochs": 200, "clip_grad": 1.0,
                              "clip_grad_apart": True, "lr_decay_every": 100},
                       task={"decoder": "mlp-norm", "decoder_layers": 5, "negatives": 3, "edge_batch": 65536})


# recipe name (what a dataset's spec names) -> (why, the recipe)
RECIPES: dict[str, tuple[str, Preset]] = {
    "heterophily": ("heterophily benchmark (Platonov et al. 2023): --arch residual, 5 blocks of 512, layer norm, "
                    "dropout 0.2, lr 3e-5, 1000 epochs, raw features, --splits all", heterophily),
    "amazon": ("Amazon co-purchase graph: raw binary features, hidden 64", amazon),
    "gae": ("GAE on a Planetoid graph (Kipf & Welling 2016): GCN 32-16 without bias, dot decoder, lr 0.01, 200 "
            "epochs, no dropout, raw binary features, test AUC and AP", gae),
    "ogbl-collab": ("OGB's full-batch ogbl-collab baseline: GCN 3x256 over the edge weights, MLP decoder, lr 0.001, "
                    "400 epochs, steps of 8,192 positives (OGB's: 65,536; test over training edges; OGB's "
                    "validation-edges protocol: --use-valedges-as-input)", ogbl_collab),
    "refined-gae-collab": ("Refined-GAE's ogbl-collab command (Ma et al. 2025): --model propgcn 4 x 1024, layer "
                           "norm, dropout 0.2, --decoder mlp-res of 5, 3 negatives, steps of 16,384 positives, lr "
                           "0.0004, clipping at 1.0 apart, 500 epochs", refined_gae_collab),
    "refined-gae-citation2": ("Refined-GAE's ogbl-citation2 command: --model propgcn 3 x 256, layer norm, dropout "
                              "0.2, learned rows of 256 beside the features, --decoder mlp-norm of 5, 3 negatives, "
                              "steps of 65,536 positives, lr 0.0003, clipping at 1.0 apart, 200 epochs",
                              refined_gae_citation2),
}


def dataset_recipe(dataset: str | None, task: str = "node", recipe: str = "auto") -> tuple[str, Preset] | None:
    """``(why, recipe)`` of the recipe a run gets: ``--recipe NAME`` (``none``: no recipe), or with ``auto`` the one
    that ``dataset``'s spec (a name, or a path's name part) names for ``task``, if any."""
    if recipe == "none":
        return None
    if recipe != "auto":
        if recipe not in RECIPES:
            raise UserError(f"unknown --recipe {recipe!r}; known: auto, none, {', '.join(sorted(RECIPES))}")
        return RECIPES[recipe]
    spec = dataset_spec(dataset)
    name = spec.recipes.get(task) if spec is not None else None
    return RECIPES[name] if name is not None else None


def task_of(given: dict[str, dict[str, Any]], dataset: str | None, stored: str | None = None) -> str:
    """The task a run's recipe is chosen for: ``--task``, else ``stored`` (what a partition holds), else the task
    ``dataset``'s spec declares (``link`` for a dataset with its own edge split), else ``node``."""
    task = given.get("task", {}).get("task", "auto")
    if task != "auto":
        return task
    spec = dataset_spec(dataset)
    return stored or (spec.task if spec is not None else "node")


def from_args(args, dataset: str | None = None, kernel_env=None, task: str | None = None) -> TrainConfig:
    """The training config of parsed ``gnndist train`` / ``run`` arguments (:func:`compose` of the flags given).

    ``kernel_env``: the user's :class:`~gnndist.kernels.KernelSettings` from the environment (read once by the
    entry point), the defaults of ``--kernel`` and ``--spmm-tune`` where those flags are not given.
    """
    from gnndist.flags import given_flags

    given = given_flags(args)
    if kernel_env is not None:
        k = given.setdefault("kernel", {})
        k.setdefault("kernel", kernel_env.impl or "auto")
        k.setdefault("spmm_tune", kernel_env.tune)
    return compose(given, dataset, task)


def compose(given: dict[str, dict[str, Any]], dataset: str | None = None, task: str | None = None) -> TrainConfig:
    """Defaults, then ``dataset``'s family recipe (of the run's task: :func:`task_of`, ``task`` what the partition
    holds), then the chosen model's preset, then the flags ``given``. A recipe that chooses the model itself
    (``--recipe refined-gae-collab``: propgcn) is that model's whole recipe: it goes over the model's preset.

    The model's preset is its own architecture's recipe: it is left out with ``--arch residual``.
    """
    from gnndist.nn.models import model_spec

    base = TrainConfig()
    recipe = dataset_recipe(dataset, task_of(given, dataset, task), given.get("run", {}).get("recipe", "auto"))
    cfg = recipe[1](base) if recipe is not None else base
    model = given.get("model", {}).get("model", cfg.model.model)
    spec = model_spec(model)  # one line when unknown
    if "split" in given.get("eval", {}) and "splits" not in given["eval"]:  # --split K over a recipe's --splits all
        given = {**given, "eval": {**given["eval"], "splits": "one"}}
    if given.get("model", {}).get("arch", cfg.model.arch) == "plain":  # a model's preset is its own architecture's
        if recipe is not None and cfg.model.model == model != base.model.model:  # the recipe chose this model
            cfg = recipe[1](with_fields(base, **spec.preset))
        else:
            cfg = with_fields(cfg, **spec.preset)
    return with_fields(cfg, **{sec: fields for sec, fields in given.items() if sec in TRAIN_SECTIONS and fields})
