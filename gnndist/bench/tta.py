"""``gnndist bench tta``: time to accuracy of full-graph training against the mini-batch peers, fairly.

    gnndist bench tta [--quick] [--datasets a,b] [--depths 2,4,8,16] [--sides gnndist,pyg-neighbor,...]
                      [--seeds 5] [--budget-s 60] [--trials K] [--threads 2] [--peers-venv DIR]

The protocol, step by step (the pure pieces are in :mod:`gnndist.bench.tta_protocol`):

1. **One problem** (:mod:`gnndist.bench.tta_problem`): the graph as ``datasets.load`` gives it, as one symmetric
   CSR without self-loops or duplicates; the features exactly as gnndist trains on them (row-normalised where none
   is negative, gnndist's default; every side then trains with normalisation off), as CSR; the labels; the
   dataset's split when it trains on enough nodes, else a seeded random 60/20/20 split of the labelled nodes (not
   stratified). ``problem.npz`` holds the arrays, ``problem.json`` the sha256 of each; every side reports the
   hashes of what it trained on, and :func:`~gnndist.bench.tta_protocol.check_same` refuses a difference.
2. **gnndist's side** trains on a 1-part partition made from exactly those arrays (its time: ``partition_s``),
   the :class:`~gnndist.training.trainer.Trainer`'s ``train_step`` alone on the clock, which starts at the first
   optimiser step; its set-up (``setup_s``) is reported beside it.
3. **The peers** run in their own venv (:mod:`gnndist.bench.peer_env`) as ``PYTHON minibatch.py JOB.json``,
   driven by :mod:`gnndist.bench.tta_driver`: they print JSON lines, ``setup``, then an ``eval`` with a weights
   snapshot every ``--eval-every-s`` training seconds, waiting (their clock paused) for ``ok`` or ``stop``, and
   ``done``. First each peer runs once in check mode (:func:`check_peers`): its hashes, and its model's logits over
   the whole graph against gnndist's model's on the same weights. A peer that cannot run is a row with the reason.
4. **One evaluator** (:class:`FullGraphEvaluator`): gnndist's model on one process over the whole graph, eval
   mode, no sampling, scores every side's weights (gnndist's after every epoch), outside every clock; its
   seconds are reported per run.
5. **Tuning** (``--trials K``, the same K per side): a seeded random search per side, paired across sides (trial j
   of every side tries the same lr, dropout and width; :meth:`~gnndist.bench.tta_protocol.Side.trials`), one seed a
   trial, each trial ranked by time to the target of all trials of all sides (those that never reach it by best
   validation); the chosen config (``tuned``) and the side's defaults (``default``) then run over ``--seeds``.
6. **The target** ``T`` = 0.98 x the best median over seeds of the best validation accuracy of a side and config;
   per run: time, epochs and steps to ``T``, s/epoch, test accuracy at the best validation (the first maximum).

Outputs in ``--out``: ``tta.csv`` (one row per run, trials included), ``tta_curves.jsonl`` (every evaluation),
``tta_summary.csv`` (per dataset, depth, side and config: medians and spread over seeds), ``tta_<dataset>_L<d>.png``
(the anytime curves); :func:`gnndist.bench.page.tta_page` renders the table. Every side runs on the CPU with
``--threads`` torch threads; the load average is recorded at the start and end of every run.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from gnndist.bench.common import Rows, Settings, loadavg, write_csv
from gnndist.bench.tta_driver import peer_job, run_peer
from gnndist.bench.tta_problem import Problem, export_problem, gnndist_partition, load_graph, load_problem
from gnndist.bench.tta_protocol import (
    SEARCH_SEED,
    SIDES,
    TRIAL_SEED,
    Hyper,
    Point,
    Run,
    TTASettings,
    best_val,
    chosen,
    final_target,
    run_columns,
    summary_rows,
    target,
)
from gnndist.errors import UserError


def _say(msg: str) -> None:
    print(f"bench: tta: {msg}", flush=True)


# ---------------------------------------------------------------------- 4. one evaluator
def _config(hyper: Hyper, seed: int = 0, epochs: int = 1):
    from gnndist.config import EvalConfig, ModelConfig, OptimConfig, RunConfig, TrainConfig

    return TrainConfig(model=ModelConfig(model=hyper.model, layers=hyper.layers, hidden=hyper.hidden,
                                         dropout=hyper.dropout, normalize_features=False),
                       optim=OptimConfig(epochs=epochs, lr=hyper.lr, weight_decay=hyper.weight_decay),
                       eval=EvalConfig(metric="acc"), run=RunConfig(seed=seed, progress=False))


class FullGraphEvaluator:
    """Accuracy of a side's weights: gnndist's model on one process over the whole graph, eval mode, no sampling.

    Args:
        graph: the whole graph (a 1-part :class:`~gnndist.graph.DistGraph`, :func:`load_graph`).
        model: a registered model's name (the weights' names are its parameters').
        layers: its depth.
        hidden: its width.

    ``evaluator(state_dict) -> {"val": acc, "test": acc, "eval_s": seconds}``; the state dict is loaded strictly,
    so weights under other names or of other shapes are an error naming them.
    """

    def __init__(self, graph, model: str, layers: int, hidden: int):
        from gnndist.tasks import task_for
        from gnndist.tasks.metrics import metric_key
        from gnndist.training.trainer import model_of

        self.graph = graph
        cfg = _config(Hyper(model, layers, hidden, 0.0, 0.01, 0.0))
        self.task = task_for(graph, cfg)
        cfg = self.task.resolved(cfg)
        self.model = model_of(cfg.model, graph, *self.task.widths(hidden))
        self.keys = metric_key("val", "acc"), metric_key("test", "acc")

    def __call__(self, state: Mapping[str, torch.Tensor]) -> dict[str, float]:
        t0 = time.perf_counter()
        self.model.load_state_dict(state)
        self.model.eval()
        with torch.no_grad():
            m = self.task.evaluate(self.model, nullcontext)
        return {"val": m[self.keys[0]], "test": m[self.keys[1]], "eval_s": time.perf_counter() - t0}

    def logits(self, state: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The model's logits ``[N, C]`` with the weights ``state`` over the whole graph, in the dataset's node order
        (a peer's check compares its own forward with them)."""
        g = self.graph
        self.model.load_state_dict(state)
        self.model.eval()
        with torch.no_grad():
            out = self.model(g, g.x)  # [N, C], the partition's order
        full = torch.empty_like(out)
        full[g.orig_id[: g.n_owned].long()] = out
        return full


class Evaluators:
    """One :class:`FullGraphEvaluator` per model, depth and width on one graph, made when first asked for."""

    def __init__(self, graph):
        self.graph, self.made = graph, {}

    def __call__(self, hyper: Hyper) -> FullGraphEvaluator:
        key = (hyper.model, hyper.layers, hyper.hidden)
        if key not in self.made:
            self.made[key] = FullGraphEvaluator(self.graph, *key)
        return self.made[key]


# ---------------------------------------------------------------------- 2. gnndist's side
def run_gnndist(graph, evaluate: Callable, hyper: Hyper, seed: int, budget_s: float, max_epochs: int,
                until: Callable[[Run], bool] | None = None) -> Run:
    """Train gnndist's :class:`~gnndist.training.trainer.Trainer` on ``graph`` until ``budget_s`` training seconds
    or ``max_epochs`` (or ``until(run)`` holds after an epoch); every epoch's weights scored by ``evaluate`` (outside
    the clock). The returned run has no dataset, depth, side or config yet (the caller's)."""
    import gnndist
    from gnndist.training.trainer import Trainer

    run = Run("", hyper.layers, "gnndist", "", seed, hyper, load_start=loadavg(),
              versions={"gnndist": gnndist.__version__, "torch": torch.__version__})
    t0 = time.perf_counter()
    trainer = Trainer(graph, _config(hyper, seed, max_epochs))
    run.setup_s = time.perf_counter() - t0
    ctx, grid = graph.context, graph.grid
    while run.epochs < max_epochs and run.train_s < budget_s:
        epoch = int(run.epochs)
        with ctx.step(seed=seed, epoch=epoch):
            grid.synchronize()
            t = time.perf_counter()
            trainer.train_step(epoch)
            grid.synchronize()
            run.train_s += time.perf_counter() - t
        if epoch == 0:
            graph.strategy.after_first_step()  # as Trainer.epoch: auto frees the layouts it did not choose
        run.epochs, run.steps = epoch + 1, run.steps + trainer.task.steps(epoch)
        r = evaluate(trainer.model.state_dict())
        run.eval_s, run.evals = run.eval_s + r["eval_s"], run.evals + 1
        run.points.append(Point(run.train_s, run.epochs, run.steps, r["val"], r["test"]))
        if until is not None and until(run):
            break
    run.s_per_epoch = run.train_s / run.epochs if run.epochs else None
    run.load_end = loadavg()
    return run


# ---------------------------------------------------------------------- 5., 6. one dataset and depth
@dataclass
class Block:
    """What one dataset's runs share: the problem, the graph every evaluation runs on, the peers' python."""

    problem: Problem
    graph: object
    evaluators: Evaluators
    partition_s: float
    peer_python: Path | None
    peer_script: Path | None
    unavailable: dict[str, str]  # side -> why it cannot run
    work: Path


def run_side(b: Block, t: TTASettings, side: str, hyper: Hyper, seed: int, config: str, depth: int) -> Run:
    """One run of ``side`` with ``hyper``; a failure is a run with the reason, not an exception."""
    dataset = b.problem.meta["dataset"]
    _say(f"{dataset} L={depth} {side} {config} seed {seed}: {hyper.label()}")
    try:
        evaluate = b.evaluators(hyper)
        if SIDES[side].full_graph:
            run = replace(run_gnndist(b.graph, evaluate, hyper, seed, t.budget_s, t.max_epochs),
                          partition_s=b.partition_s)
        else:
            load_start = loadavg()
            job = peer_job(b.problem.path, side, hyper, seed, t.threads, t.budget_s, t.max_epochs, t.eval_every,
                           b.work / f"snapshots-{side}-{seed}")
            rec = run_peer(b.peer_python, b.peer_script, job, evaluate, b.problem.sha256, b.work)
            d = rec.last
            run = Run("", depth, side, config, seed, hyper, rec.points, setup_s=rec.setup.get("setup_s"),
                      train_s=float(d.get("train_s", 0.0)), epochs=float(d.get("epochs", 0.0)),
                      steps=int(d.get("steps", 0)), s_per_epoch=d.get("s_per_epoch"), eval_s=rec.eval_s,
                      evals=rec.evals, load_start=load_start, load_end=loadavg(),
                      versions=dict(rec.setup.get("versions", {})))
    except Exception as e:  # one run failing (a peer's crash, memory) is a row, not the end
        why = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
        _say(f"{side} failed: {why}")
        return Run(dataset, depth, side, config, seed, hyper, status=f"failed: {why}")
    return replace(run, dataset=dataset, depth=depth, side=side, config=config)


def run_block(b: Block, t: TTASettings, depth: int) -> tuple[list[Run], float | None, float | None]:
    """Every run of one dataset at one depth: each side's trials, then its tuned config and its defaults over the
    seeds. Returns the runs, the tuning target and the final target."""
    dataset, nodes = b.problem.meta["dataset"], int(b.problem.meta["nodes"])
    runs: list[Run] = []
    bases, trials = {}, {}
    for side in t.sides:
        if side in b.unavailable:
            runs.append(Run(dataset, depth, side, "default", 0, status=f"unavailable: {b.unavailable[side]}"))
            continue
        bases[side] = SIDES[side].default(depth, t.hidden, nodes, t.deep_model)
        trials[side] = [run_side(b, t, side, h, TRIAL_SEED + k, f"trial-{k}", depth)
                        for k, h in enumerate(SIDES[side].trials(bases[side], t.trials, SEARCH_SEED))]
        runs += trials[side]
    T_tune = target({(r.side, r.config): [best_val(r.points)] for r in runs if r.trial and r.points})
    for side, base in bases.items():
        configs = [("default", base)]
        pick = chosen([r.points for r in trials[side]], T_tune)
        if pick is not None and trials[side][pick].points:
            configs.append(("tuned", trials[side][pick].hyper))
        for config, hyper in configs:
            runs += [run_side(b, t, side, hyper, seed, config, depth) for seed in range(t.seeds)]
    return runs, T_tune, final_target(runs)


# ---------------------------------------------------------------------- the suite
def peer_sides(t: TTASettings) -> tuple[Path | None, Path | None, dict[str, str]]:
    """The peers' python and script, and every requested peer that cannot run with its reason (installing the
    peers' venv on first use: :func:`gnndist.bench.peer_env.ensure`)."""
    peers = [s for s in t.sides if not SIDES[s].full_graph]
    if not peers:
        return None, None, {}
    from gnndist.bench.peer_env import MINIBATCH, PeerEnvError, ensure

    if not MINIBATCH.exists():
        return None, None, {p: f"{MINIBATCH} is missing" for p in peers}
    try:
        env = ensure(Path(t.peers_venv) if t.peers_venv else None, progress=_say)
    except PeerEnvError as e:
        return None, None, {p: str(e) for p in peers}
    return env.python, MINIBATCH, {p: env.unavailable[p] for p in peers if p in env.unavailable}


CHECK_TOLERANCE = 1e-4  # a peer's logits against gnndist's on the same weights: max error / (1 + max |logit|)


def check_peers(b: Block, t: TTASettings) -> dict[str, str]:
    """Each available peer once in ``check`` mode on the problem: its set-up and hashes, and its model's logits
    over the whole graph against gnndist's model's with the same weights. Returns the peers that fail, why."""
    out = {}
    for side in t.sides:
        if SIDES[side].full_graph or side in b.unavailable:
            continue
        hyper = SIDES[side].default(min(t.depths), t.hidden, int(b.problem.meta["nodes"]), t.deep_model)
        job = peer_job(b.problem.path, side, hyper, 0, t.threads, t.budget_s, t.max_epochs, t.eval_every,
                       b.work / f"snapshots-check-{side}", mode="check")
        try:
            rec = run_peer(b.peer_python, b.peer_script, job, None, b.problem.sha256, b.work)
            theirs = torch.from_numpy(rec.check.pop("logits"))  # [N, C]
            ours = b.evaluators(hyper).logits({k: torch.from_numpy(v) for k, v in rec.check.items()})
        except (UserError, RuntimeError, KeyError) as e:  # RuntimeError: weights gnndist's model does not have
            out[side] = f"check failed: {e}"
            continue
        err = float((ours - theirs).abs().max() / (1 + ours.abs().max())) if ours.shape == theirs.shape else math.inf
        _say(f"{side}: its model on the full graph, gnndist's weights: max |logit difference| / (1 + max |logit|) "
             f"{err:.2g} (tolerance {CHECK_TOLERANCE:g})")
        if err > CHECK_TOLERANCE:
            out[side] = (f"check failed: its model's logits {tuple(theirs.shape)} differ from gnndist's "
                         f"{tuple(ours.shape)} on the same weights (error {err:.2g} > {CHECK_TOLERANCE:g})")
    return out


def tta(s: Settings, rows: Rows, work: Path) -> None:
    """The suite: every dataset, depth and side of ``s.tta``; rows into ``rows``, the other files into ``s.out``."""
    from gnndist.nn.models import MODELS

    t = s.tta or (TTASettings.quick() if s.quick else TTASettings())
    if s.device != "cpu":
        raise UserError("gnndist bench tta runs every side on the CPU (--device cpu)")
    if t.deep_model not in MODELS:
        raise UserError(f"--deep-model: unknown model {t.deep_model!r}; known: {', '.join(sorted(MODELS))}")
    threads = torch.get_num_threads()
    torch.set_num_threads(t.threads)
    python, script, unavailable = peer_sides(t)
    summary: list[dict] = []
    curves_path = s.out / "tta_curves.jsonl"
    try:
        # written as it goes, as tta.csv and tta_summary.csv are: a long run stopped early keeps what it measured
        with open(curves_path, "w") as curves:
            for dataset in t.datasets:
                _dataset(s, t, rows, summary, work / dataset.replace(os.sep, "_"), dataset, python, script,
                         unavailable, curves)
    finally:
        torch.set_num_threads(threads)
    if s.plots:
        from gnndist.bench.plots import tta_figures

        for png in tta_figures(curves_path, s.out / "tta_summary.csv", s.out):
            _say(f"wrote {png}")


def _dataset(s: Settings, t: TTASettings, rows: Rows, summary: list[dict], work: Path, dataset: str, python, script,
             unavailable: dict[str, str], curves) -> None:
    """One dataset: export, partition, check the peers, then every depth (:func:`run_block`); its rows, curve
    points and summary rows appended and written out after each depth."""
    _say(f"{dataset}: exporting the problem")
    problem = load_problem(export_problem(dataset, s.root, t.split_seed, work))
    _say(f"{dataset}: {problem.meta['nodes']:,} nodes, {problem.meta['entries']:,} entries, split "
         f"{problem.meta['split']} ({problem.meta['train']:,} / {problem.meta['val']:,} / {problem.meta['test']:,})")
    partdir, partition_s = gnndist_partition(problem, work / "gnndist-p1")
    graph = load_graph(partdir)
    b = Block(problem, graph, Evaluators(graph), partition_s, python, script, dict(unavailable), work)
    b = replace(b, unavailable={**b.unavailable, **check_peers(b, t)})
    for depth in t.depths:
        runs, T_tune, T = run_block(b, t, depth)
        for r in runs:
            T_run = T_tune if r.trial else T
            rows.add(**run_columns(r, T_run))
            for p in r.points:
                curves.write(json.dumps({"dataset": r.dataset, "depth": r.depth, "side": r.side, "config": r.config,
                                         "seed": r.seed, **p._asdict()}) + "\n")
        stamp = {"suite": "tta_summary", **rows.env, "loadavg_1m": loadavg()}
        summary += [{**stamp, **r} for r in summary_rows(runs, T, t.sides)]
        curves.flush()
        write_csv(s.out / "tta.csv", rows.rows)
        write_csv(s.out / "tta_summary.csv", summary)
        _say(f"{problem.meta['dataset']} L={depth}: target {T if T is None else round(T, 4)}")
