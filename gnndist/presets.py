"""Presets: a dataset family's recipe, then the model's, then the flags given.

    cfg = compose(given_flags(args), dataset="amazon-photo")  # defaults < recipe < model preset < flags

A dataset family's recipe is a :data:`Preset` ``(TrainConfig) -> TrainConfig`` in :data:`DATASET_RECIPES`. A
model's preset is data, config fields by section, registered with the model (:func:`gnndist.nn.register_model`,
the one registry: its spec in :data:`gnndist.nn.models.MODELS`, where the built-in models' are too) and applied
here with :func:`~gnndist.config.with_fields`, so ``gnndist.nn`` does not import the config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gnndist.config import TRAIN_SECTIONS, Preset, TrainConfig, with_fields


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


# dataset family: (a pattern of the dataset's name, why, its recipe), first match wins
DATASET_RECIPES: list[tuple[str, str, Preset]] = [
    (r"^(roman[-_]empire|amazon[-_]ratings|minesweeper|tolokers|questions)(\.npz)?$",
     "heterophily benchmark (Platonov et al. 2023): --arch residual, 5 blocks of 512, layer norm, dropout 0.2, "
     "lr 3e-5, 1000 epochs, raw features, --splits all", heterophily),
    (r"amazon", "Amazon co-purchase graph: raw binary features, hidden 64", amazon),
]


def dataset_recipe(dataset: str | None) -> tuple[str, Preset] | None:
    """``(why, recipe)`` of the first :data:`DATASET_RECIPES` family matching ``dataset``'s name, if any."""
    name = Path(dataset).name.lower() if dataset else ""
    for pattern, why, recipe in DATASET_RECIPES:
        if re.search(pattern, name):
            return why, recipe
    return None


def from_args(args, dataset: str | None = None, kernel_env=None) -> TrainConfig:
    """The training config of parsed ``gnndist train`` / ``run`` arguments (:func:`compose` of the flags given).

    ``kernel_env``: the user's :class:`~gnndist.kernels.KernelSettings` from the environment (read once by the
    entry point), the defaults of ``--kernel`` and ``--spmm-tune`` where those flags are not given.
    """
    from gnndist.config import given_flags

    given = given_flags(args)
    if kernel_env is not None:
        k = given.setdefault("kernel", {})
        k.setdefault("kernel", kernel_env.impl or "auto")
        k.setdefault("spmm_tune", kernel_env.tune)
    return compose(given, dataset)


def compose(given: dict[str, dict[str, Any]], dataset: str | None = None) -> TrainConfig:
    """Defaults, then ``dataset``'s family recipe, then the chosen model's preset, then the flags ``given``.

    The model's preset is its own architecture's recipe: it is left out with ``--arch residual``.
    """
    from gnndist.nn.models import model_spec

    spec = model_spec(given.get("model", {}).get("model", TrainConfig().model.model))  # one line when unknown
    cfg = TrainConfig()
    recipe = dataset_recipe(dataset)
    if recipe is not None:
        cfg = recipe[1](cfg)
    if "split" in given.get("eval", {}) and "splits" not in given["eval"]:  # --split K over a recipe's --splits all
        given = {**given, "eval": {**given["eval"], "splits": "one"}}
    if given.get("model", {}).get("arch", cfg.model.arch) == "plain":  # a model's preset is its own architecture's
        cfg = with_fields(cfg, **spec.preset)
    return with_fields(cfg, **{sec: fields for sec, fields in given.items() if sec in TRAIN_SECTIONS and fields})
