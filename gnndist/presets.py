"""Presets: functions that return a config. A dataset family's recipe, then the model's, then the flags given.

    cfg = compose(given_flags(args), dataset="amazon-photo")  # defaults < recipe < model preset < flags

A preset is a :data:`Preset` ``(TrainConfig) -> TrainConfig``: the model's are registered with
the model (:func:`gnndist.nn.register_model`), a dataset family's in :data:`DATASET_RECIPES`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gnndist.config import TRAIN_SECTIONS, Preset, TrainConfig, with_fields
from gnndist.errors import UserError


def amazon(cfg: TrainConfig) -> TrainConfig:
    """Amazon co-purchase graphs (Shchur et al. 2018) have binary bag-of-words features: row-normalised, with
    hidden 16, a GCN had not converged after 200 epochs (Photo 60.4 +- 6.3); raw features and hidden 64 reach
    90.2 +- 2.0 (benchmarks/README.md, "Accuracy")."""
    return with_fields(cfg, model={"hidden": 64, "normalize_features": False})


# dataset family: (a pattern of the dataset's name, why, its recipe), first match wins
DATASET_RECIPES: list[tuple[str, str, Preset]] = [
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
    """Defaults, then ``dataset``'s family recipe, then the chosen model's preset, then the flags ``given``."""
    from gnndist.nn.models import MODELS, PRESETS

    name = given.get("model", {}).get("model", TrainConfig().model.model)
    if name not in MODELS:
        raise UserError(f"unknown --model {name!r}; known: {', '.join(sorted(MODELS))}")
    cfg = TrainConfig()
    recipe = dataset_recipe(dataset)
    if recipe is not None:
        cfg = recipe[1](cfg)
    cfg = PRESETS[name](cfg)
    return with_fields(cfg, **{sec: fields for sec, fields in given.items() if sec in TRAIN_SECTIONS and fields})
