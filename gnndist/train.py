"""``gnndist train`` (and the training of ``gnndist run``): the job over a partition directory, one rank's body
and the summary it prints.

    train(partdir, cfg)          # checks what it can before any rank starts, launches, reports (rank 0)
    train_rank(grid, partdir, cfg)   # one rank: load its part, fit every run, return the Summary

The ranks start through :func:`gnndist.launcher.launch` (the elastic launcher, or this rank of ``torchrun``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from gnndist.config import TrainConfig
from gnndist.dist.grid import together
from gnndist.errors import UserError
from gnndist.launcher import launch, place, restart_count, under_torchrun


def stage(msg: str, cfg: TrainConfig) -> None:
    """Say which stage the run is in, terminal or not (to standard error under ``--json``, whose stdout is data)."""
    print(f"gnndist: {msg}", file=sys.stderr if cfg.run.json else sys.stdout, flush=True)


def say_modelled_widths(partdir, cfg: TrainConfig) -> None:
    """A note when the partition's balance was chosen for another model than the one trained (still exact)."""
    from gnndist.cost import model_widths
    from gnndist.partition import read_meta

    try:
        meta = read_meta(partdir)
        modelled = meta["report"]["cost_model"]["widths"]
    except (UserError, KeyError, TypeError):
        return  # launch reports a bad directory; a partition from before the cost model has no widths
    trained = list(model_widths(modelled[0], modelled[-1], cfg.model.hidden, cfg.model.layers))
    if modelled != trained and meta.get("method") != "random":  # same data: the hidden widths and depth differ
        stage(f"note: this partition was chosen for a model of widths {'-'.join(map(str, modelled))}, training "
              f"{'-'.join(map(str, trained))}; results are the same, the balance may not be the fastest "
              f"(gnndist partition --hidden {cfg.model.hidden} --layers {cfg.model.layers} chooses for this one)", cfg)


def dataset_of(partdir) -> tuple[str | None, str | None]:
    """The dataset name a partition was made from and the task it holds (:func:`gnndist.tasks.task_name`), for its
    family recipe; ``(None, None)`` if unreadable."""
    from gnndist.partition import read_meta
    from gnndist.tasks import task_name

    try:
        meta = read_meta(partdir)
    except UserError:
        return None, None  # launch reports the bad directory in its own words
    return meta.get("dataset"), task_name(meta)


def featureless_inputs(graph, cfg: TrainConfig) -> str:
    """What a typed graph's model reads for its featureless types (`` (featureless word: --embedding zero)``), for
    the run's first line; empty where the model takes no ``--embedding`` or every type has features."""
    from gnndist.nn.models import model_spec

    h = graph.hetero
    if h is None or not model_spec(cfg.model.model).hetero or all(h.featured):
        return ""
    types = ", ".join(t for t, f in zip(h.node_types, h.featured) if not f)
    return f" (featureless {types}: --embedding {cfg.model.embedding})"


def train_rank(grid, partdir: str, cfg: TrainConfig, prepare: Callable[[], object] | None = None):
    """Body of one rank of ``gnndist train``: load the part, train every run; returns the
    :class:`~gnndist.training.summary.Summary`.

    ``prepare``, when given, runs on rank 0 first (``gnndist run`` under torchrun: making the
    partition) while the other ranks wait in the process group; a failure there stops every rank.
    After an elastic restart with ``--checkpoint``, training resumes from the newest good checkpoint.
    """
    from gnndist.graph import DistGraph
    from gnndist.training.runs import fit_runs

    if prepare is not None:
        together(grid, prepare if grid.is_main else None, "rank 0 could not prepare the partition")
    arrays, meta = together(grid, lambda: DistGraph.read(partdir, grid), "another rank could not load its part "
                            "(see its error)")  # before any collective of the build: the ranks fail together
    graph = DistGraph.from_config(arrays, meta, grid, cfg, root=partdir)
    if grid.is_main:
        stage(f"training {cfg.model.model} on {grid.world_size} rank(s) for {cfg.optim.epochs} epochs"
              f"{featureless_inputs(graph, cfg)}; {grid.describe()}", cfg)  # the backend and device, once
    summary = fit_runs(graph, cfg, resume_if_any=bool(cfg.run.checkpoint) and restart_count() > 0)
    grid.barrier()
    return summary


def report(summary, cfg: TrainConfig) -> None:
    """Print a :class:`~gnndist.training.summary.Summary`: one JSON line under ``--json``, else one line per run
    and the mean."""
    if cfg.run.json:
        print(json.dumps(summary.to_dict()), flush=True)
        return
    last, m = summary.last, summary.metric
    where = f"{last.dataset}: {last.model} on {last.nproc} rank(s)"
    modelled = f", modelled {last.model_epoch_time_s * 1e3:.4g} ms ({last.model_network})" \
        if last.model_epoch_time_s is not None else ""
    scaled = last.loss_scale
    fp16 = f", fp16: {scaled['skipped_steps']} steps skipped, loss scale {scaled['scale']:g}" if scaled else ""
    cost = f"({last.epoch_time_s * 1e3:.1f} ms/epoch{modelled}, {last.comm_bytes_per_epoch:,} comm bytes/epoch{fp16})"
    if len(summary.runs) <= 1:
        print(f"{where}, best epoch {last.best.epoch}: {m} train {last.best.train:.4f} "
              f"val {last.best.val:.4f} test {last.best.test:.4f} {cost}", flush=True)
        return
    for r in summary.runs:
        split = "" if r.split is None else f" split {r.split}"
        b = r.summary.best
        print(f"run {r.run} (seed {r.seed}{split}): best epoch {b.epoch} of {r.summary.epochs_run}: "
              f"{m} train {b.train:.4f} val {b.val:.4f} test {b.test:.4f}")
    print(f"{where}, {len(summary.runs)} runs, {m} mean ± std: " + " ".join(
        f"{s} {summary.mean[s]:.4f} ± {summary.std[s]:.4f}" for s in ("train", "val", "test"))
        + f" {cost}", flush=True)


def train(partdir: str, cfg: TrainConfig, prepare: Callable[[], object] | None = None) -> int:
    """``gnndist train``: one rank per part; prints the summary; returns the exit code (0).

    ``prepare`` (under torchrun only): made on rank 0 inside the process group before loading (:func:`train_rank`).
    """
    from gnndist.partition import read_meta
    from gnndist.strategies import strategy_from_config
    from gnndist.training.runs import plan_runs

    meta = read_meta(partdir) if prepare is None else None
    if meta is not None:
        plan_runs(cfg, meta)  # a split or run that cannot be: one line, before any rank starts
    d = cfg.dist
    if not under_torchrun() and d.ranks > 1:
        strategy_from_config(d).grid_shape(d.ranks)  # a layout that cannot fit: one line, before any rank starts
        if meta["parts"] != d.ranks:
            raise UserError(f"{partdir} has {meta['parts']} parts but --ranks is {d.ranks}: they must match")
        stage(f"starting {d.ranks} ranks", cfg)
    summary = launch(train_rank, partdir, cfg, prepare, ranks=d.ranks, max_restarts=d.max_restarts, backend=d.backend,
                     timeout=d.timeout, check_collectives=d.check_collectives)
    if place().rank == 0:
        report(summary, cfg)
    return 0
