"""Several training runs on one partition and one process group: seeds and splits, mean ± std.

:func:`plan_runs` turns ``--runs``, ``--split`` and ``--splits`` into ``(seed, split)`` pairs;
:func:`fit_runs` trains each with a fresh model and optimiser and returns a
:class:`~gnndist.training.summary.Summary`.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from torch import nn

from gnndist.config import TrainConfig
from gnndist.errors import UserError
from gnndist.graph import DistGraph
from gnndist.tasks import metrics
from gnndist.tasks.metrics import SPLITS
from gnndist.training.summary import RunRecord, Summary
from gnndist.training.trainer import ModelFactory, Trainer

log = logging.getLogger("gnndist")


def plan_runs(cfg: TrainConfig, meta: dict) -> list[tuple[int, int | None]]:
    """``(seed, split)`` of every run from ``--runs``, ``--split`` and ``--splits``; ``split`` None: the stored masks.

    Run ``i`` (counting every run) trains with seed ``--seed + i``. ``--splits all`` runs
    ``--runs`` seeds on each shipped split; ``--splits random`` runs run ``r`` on the
    partition's random split ``r`` (seed ``--split-seed + r``).
    """
    e, name = cfg.eval, meta.get("dataset")
    k, kind = int(meta.get("splits") or 0), meta.get("split_kind")
    if e.splits == "all":
        if kind != "shipped":
            raise UserError(f"--splits all: {name} ships no splits (it has one split: the seeded random split of "
                            f"--split-seed, or its official one); use --runs N, or --splits random")
        splits = [s for s in range(k) for _ in range(e.runs)]
    elif e.splits == "random":
        if kind != "random" or k < e.runs:
            have = f"holds {k} random splits" if kind == "random" else "holds no random splits"
            raise UserError(f"--splits random --runs {e.runs}: the partition of {name} {have}; `gnndist run` makes "
                            f"them, or `gnndist partition --random-splits {e.runs}`")
        splits = list(range(e.runs))
    elif e.split is not None:
        if kind != "shipped":
            raise UserError(f"--split {e.split}: {name} ships no splits; its random split is chosen by --split-seed")
        if e.split >= k:
            raise UserError(f"--split {e.split} is out of range: {name} ships {k} splits (0..{k - 1})")
        splits = [e.split] * e.runs
    else:
        splits = [0 if kind == "shipped" else None] * e.runs
    return [(cfg.run.seed + i, s) for i, s in enumerate(splits)]


def fit_runs(graph: DistGraph, cfg: TrainConfig, model: ModelFactory | None = None,
             resume_if_any: bool = False) -> Summary:
    """Train every run of :func:`plan_runs` on one graph and one process group.

    Each run re-initialises the model (``model``: a factory, as for :class:`~gnndist.training.trainer.Trainer`;
    default ``--model``) and the optimiser with its own seed. With several runs,
    ``--checkpoint DIR`` keeps run ``i`` in ``DIR/run-i``.
    """
    plan = plan_runs(cfg, graph.meta)
    if isinstance(model, nn.Module) and len(plan) > 1:
        raise UserError(f"{len(plan)} runs need a fresh model each: pass a factory (in_channels, out_channels) -> "
                        f"model, not a module")
    runs = []
    for i, (seed, split) in enumerate(plan):
        g = graph.with_split(split) if split is not None else graph
        run = dataclasses.replace(cfg.run, seed=seed)
        if cfg.run.checkpoint and len(plan) > 1:  # --resume requires run 0's checkpoint; later runs may not have begun
            run = dataclasses.replace(run, checkpoint=str(Path(cfg.run.checkpoint) / f"run-{i}"),
                                      resume=run.resume and i == 0)
        trainer = Trainer(g, dataclasses.replace(cfg, run=run), model, resume_if_any=resume_if_any or cfg.run.resume)
        s = trainer.fit()
        runs.append(RunRecord(i, seed, split, s))
        if graph.grid.is_main and len(plan) > 1:
            log.info(f"run {i + 1}/{len(plan)} (seed {seed}, split {split}): " + " ".join(
                f"{k} {s.value(k):.4f}" for k in SPLITS) + f", best epoch {s.best.epoch}")
    mean_std = {k: metrics.mean_std([r.summary.value(k) for r in runs]) for k in SPLITS}
    split_kind = graph.meta.get("split_kind") if any(r.split is not None for r in runs) else None
    return Summary(runs[-1].summary, runs, {k: v[0] for k, v in mean_std.items()},
                   {k: v[1] for k, v in mean_std.items()}, cfg.eval.splits, split_kind)
