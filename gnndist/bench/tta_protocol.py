"""The pure pieces of ``gnndist bench tta``: curves, the target, time to it, model selection, summaries over
seeds, the problem's hashes, the sides with their defaults and search spaces, and the tuning choice.

No torch and no processes here: :mod:`gnndist.bench.tta` runs the protocol with these.

    curve = [Point(train_s, epoch, steps, val, test), ...]    # one run: the shared evaluator's accuracies
    T = target({(side, config): [best_val(c) for c in seeds]})  # 0.98 x the best median over seeds
    time_to(curve, T)         # the first point with val >= T (None: never)
    at_best_val(curve)        # model selection on validation only: the first maximum
    spread([...])             # median [min, max] over seeds, never-reached counted as such
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from gnndist.errors import UserError

TARGET_FRACTION = 0.98  # T = this x the best median (over seeds) of the best validation accuracy
SEARCH_SEED = 0  # the seed of every side's random search (with the side's name and the depth)
TRIAL_SEED = 1000  # trial k of the search trains with seed TRIAL_SEED + k (the reported seeds are 0 .. seeds - 1)
DEEP_FROM = 4  # gnndist's side trains --deep-model from this depth on, SAGE below it


class Point(NamedTuple):
    """One evaluation of a run's weights by the shared evaluator."""

    train_s: float  # training seconds so far: the run's clock (set-up and evaluation outside it)
    epoch: float  # epochs so far (fractional for a mini-batch side evaluated between epoch ends)
    steps: int  # optimiser steps so far
    val: float  # validation accuracy
    test: float  # test accuracy


Curve = Sequence[Point]


def anytime(curve: Curve) -> list[tuple[float, float]]:
    """The anytime curve: ``(train_s, best validation accuracy so far)`` at every point."""
    out, best = [], -math.inf
    for p in curve:
        best = max(best, p.val)
        out.append((p.train_s, best))
    return out


def at_best_val(curve: Curve) -> Point | None:
    """The point of the best validation accuracy, the first maximum (model selection on validation only)."""
    best = None
    for p in curve:
        if best is None or p.val > best.val:
            best = p
    return best


def best_val(curve: Curve) -> float | None:
    p = at_best_val(curve)
    return p.val if p else None


def target(best_vals: Mapping[Hashable, Sequence[float]], fraction: float = TARGET_FRACTION) -> float | None:
    """``fraction`` x the maximum over groups (a side and its config) of the median over the group's seeds of
    the best validation accuracy; ``None`` when no group has a value."""
    medians = [statistics.median(v) for v in best_vals.values() if v]
    return fraction * max(medians) if medians else None


def time_to(curve: Curve, T: float | None) -> Point | None:
    """The first point whose validation accuracy reaches ``T`` (None: never, or no target)."""
    if T is None:
        return None
    return next((p for p in curve if p.val >= T), None)


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum over seeds; ``None`` where a seed's value is "never" (not reached) and that
    decides it: the median when more than half never reached, the maximum when one did not."""

    median: float | None
    lo: float | None
    hi: float | None
    reached: int
    n: int


def spread(values: Sequence[float | None]) -> Spread:
    """:class:`Spread` of per-seed values, ``None`` meaning never (counted as +inf)."""
    vals = [math.inf if v is None else float(v) for v in values]
    if not vals:
        return Spread(None, None, None, 0, 0)
    med, lo, hi = statistics.median(vals), min(vals), max(vals)

    def finite(v: float) -> float | None:
        return None if math.isinf(v) else v

    return Spread(finite(med), finite(lo), finite(hi), sum(not math.isinf(v) for v in vals), len(vals))


# ---------------------------------------------------------------------- one problem on every side
PROBLEM_ARRAYS = ("indptr", "indices", "x_indptr", "x_indices", "x_data", "x_shape", "y", "train_mask", "val_mask",
                  "test_mask")


def array_hashes(arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """The sha256 of each array's bytes (C order), by name: what every side reports it trained on."""
    return {k: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() for k, a in sorted(arrays.items())}


def check_same(expected: Mapping[str, str], reported: Mapping[str, str], who: str = "a peer") -> None:
    """Raise a :class:`UserError` naming every array whose hash ``who`` reports differently (or not at all)."""
    wrong = sorted(k for k in expected if reported.get(k) != expected[k])
    extra = sorted(set(reported) - set(expected))
    if wrong or extra:
        what = [f"{k} differs" if k in reported else f"{k} missing" for k in wrong] + [f"{k} unknown" for k in extra]
        raise UserError(f"{who} did not train on the exported problem: {', '.join(what)}")


# ---------------------------------------------------------------------- sides
@dataclass(frozen=True)
class Hyper:
    """One configuration of a side: the model and the optimiser, and a mini-batch side's sampler."""

    model: str
    layers: int
    hidden: int
    dropout: float
    lr: float
    weight_decay: float
    batch_size: int = 0  # neighbour sampling: seed nodes per batch
    fanouts: tuple[int, ...] = ()  # neighbour sampling: neighbours per layer, first (outermost hop) first
    num_parts: int = 0  # Cluster-GCN: clusters of the graph
    clusters_per_batch: int = 0  # Cluster-GCN: clusters per batch

    def label(self) -> str:
        s = f"{self.model} L{self.layers} h{self.hidden} lr{self.lr:g} do{self.dropout:g} wd{self.weight_decay:g}"
        if self.batch_size:
            s += f" b{self.batch_size} f{'-'.join(map(str, self.fanouts))}"
        if self.num_parts:
            s += f" parts{self.num_parts} c{self.clusters_per_batch}"
        return s

    def columns(self) -> dict:
        return {"model": self.model, "layers": self.layers, "hidden": self.hidden, "dropout": self.dropout,
                "lr": self.lr, "weight_decay": self.weight_decay, "batch_size": self.batch_size or "",
                "fanouts": ",".join(map(str, self.fanouts)), "num_parts": self.num_parts or "",
                "clusters_per_batch": self.clusters_per_batch or ""}


FANOUTS = (15, 10, 5)  # PyG's examples/ogbn_products_sage.py (3 layers); 15,10 at L = 2; 5 for every deeper layer


def fanouts(depth: int, base: tuple[int, ...] = FANOUTS) -> tuple[int, ...]:
    """Neighbours per layer at ``depth``: ``base``, its last value repeated for deeper layers."""
    return tuple(base[min(i, len(base) - 1)] for i in range(depth))


NODES_PER_CLUSTER = 155  # PyG's examples/cluster_gcn_reddit.py: 1500 clusters of Reddit's 232,965 nodes


@dataclass(frozen=True)
class Side:
    """One side of the comparison, declared once: how it trains, its defaults and what its search draws from.

    The defaults: gnndist's own lr (its model's preset: SAGE's 0.03, GCNII's 0.01) and dropout (0.5, the width
    given) with the peers' weight decay, none (its
    ``gnndist train`` default 5e-4, Kipf's for 200 Planetoid epochs, capped Amazon Photo at 0.920 validation where
    no weight decay reached 0.953: ``benchmarks/tta_sweep.py``); the neighbour
    samplers' as PyG's ``examples/ogbn_products_sage.py`` (SAGE, hidden 256, lr 0.003, dropout 0.5, no weight
    decay, batches of 1024, fan-outs 15,10,5 cut or extended with 5 to the depth); Cluster-GCN's as PyG's
    ``examples/cluster_gcn_reddit.py`` (SAGE, hidden 128, lr 0.005, dropout 0.5, clusters of ~155 nodes, 20 a
    batch). The mini-batch sides train SAGE at every depth; gnndist SAGE below :data:`DEEP_FROM` layers and its
    deep model from there.
    """

    name: str
    library: str  # gnndist | pyg | dgl
    sampler: str  # full | neighbor | cluster
    defaults: Mapping[str, object]
    space: Mapping[str, tuple] = field(default_factory=dict)  # field -> values a trial draws from

    @property
    def full_graph(self) -> bool:
        return self.sampler == "full"

    def model(self, depth: int, deep_model: str) -> str:
        return deep_model if self.full_graph and depth >= DEEP_FROM else "sage"

    def default(self, depth: int, hidden: int | None, nodes: int, deep_model: str = "gcn2") -> Hyper:
        """The side's default configuration at ``depth`` on a graph of ``nodes`` nodes (gnndist: width ``hidden``,
        else :func:`full_graph_width`)."""
        d, model = dict(self.defaults), self.model(depth, deep_model)
        width = d.get("hidden", hidden if hidden is not None else full_graph_width(model))
        lr = full_graph_lr(model) if self.full_graph else float(d["lr"])
        h = Hyper(model, depth, int(width), float(d["dropout"]), lr, float(d["weight_decay"]))
        if self.sampler == "neighbor":
            h = replace(h, batch_size=int(d["batch_size"]), fanouts=fanouts(depth))
        elif self.sampler == "cluster":
            h = replace(h, num_parts=max(2, round(nodes / NODES_PER_CLUSTER)),
                        clusters_per_batch=int(d["clusters_per_batch"]))
        return h

    def trials(self, base: Hyper, k: int, seed: int) -> list[Hyper]:
        """``k`` configurations around ``base``: the shared fields stratified, the sampler's own drawn at random.

        Paired and stratified: the fields every side tunes (:data:`COMMON_SPACE`: lr, dropout, width) come from one
        stream seeded by ``seed`` and the depth, so trial ``j`` of every side tries the same lr, dropout and width;
        each field runs through a shuffle of its values before any value repeats, so four trials try each of the
        four learning rates once (a Latin square over the shared fields). The sampler's own fields (batch size,
        fan-outs, clusters per batch) come from a stream of the side's, uniformly. With few trials, independent
        draws made the comparison a matter of which side drew the good learning rate, and paired random draws of
        whether any side drew it."""
        shared = random.Random(f"tta:{seed}:shared:{base.layers}")
        own = random.Random(f"tta:{seed}:{self.name}:{base.layers}")
        columns = {name: stratified(values, k, shared) for name, values in COMMON_SPACE.items()}
        out = []
        for j in range(k):
            drawn = {name: columns[name][j] if name in COMMON_SPACE else own.choice(values)
                     for name, values in self.space.items()}
            base_fanouts = drawn.pop("fanout_base", None)
            h = replace(base, **drawn)
            if base_fanouts is not None:
                h = replace(h, fanouts=fanouts(base.layers, base_fanouts))
            if h.clusters_per_batch:
                h = replace(h, clusters_per_batch=min(h.clusters_per_batch, h.num_parts))
            out.append(h)
        return out


def stratified(values: Sequence, k: int, rng: random.Random) -> list:
    """``k`` values: shuffles of ``values`` one after another, so each value comes once before any comes twice."""
    out: list = []
    while len(out) < k:
        block = list(values)
        rng.shuffle(block)
        out += block
    return out[:k]


def full_graph_width(model: str) -> int:
    """gnndist's default width without ``--hidden``: :data:`FULL_GRAPH_WIDTH` for SAGE (below :data:`DEEP_FROM`),
    the deep model's registered preset width from there on (GCNII's recipe and ResGCN+'s: 64). At L = 8 on Coauthor
    CS, GCNII at 256 reached 0.40 validation accuracy in 90 s (2.85 s an epoch), at 64 0.94 (0.58 s an epoch)."""
    from gnndist.nn.models import model_spec

    preset = model_spec(model).preset.get("model", {}) if model != "sage" else {}
    return int(preset.get("hidden", FULL_GRAPH_WIDTH))


def full_graph_lr(model: str) -> float:
    """gnndist's default learning rate for ``model``, as ``gnndist run --model MODEL`` composes it (its preset's:
    SAGE 0.03, GCNII 0.01, ResGCN+ 0.005)."""
    from gnndist.presets import compose

    return compose({"model": {"model": model}}).optim.lr


FULL_GRAPH_WIDTH = 256  # gnndist's SAGE width (the peers' NeighborLoader examples')
COMMON_SPACE = {"lr": (0.001, 0.003, 0.01, 0.03), "dropout": (0.0, 0.2, 0.5, 0.7), "hidden": (64, 128, 256, 512)}
NEIGHBOR_SPACE = {**COMMON_SPACE, "batch_size": (256, 512, 1024, 2048, 4096),
                  "fanout_base": ((5, 5), (10, 5), (15, 10, 5), (25, 10, 5))}
CLUSTER_SPACE = {**COMMON_SPACE, "clusters_per_batch": (5, 10, 20, 40)}
NEIGHBOR_DEFAULTS = {"hidden": 256, "lr": 0.003, "dropout": 0.5, "weight_decay": 0.0, "batch_size": 1024}

SIDES = {s.name: s for s in (
    Side("gnndist", "gnndist", "full", {"dropout": 0.5, "weight_decay": 0.0}, COMMON_SPACE),  # lr: full_graph_lr
    Side("pyg-neighbor", "pyg", "neighbor", NEIGHBOR_DEFAULTS, NEIGHBOR_SPACE),
    Side("pyg-cluster", "pyg", "cluster",
         {"hidden": 128, "lr": 0.005, "dropout": 0.5, "weight_decay": 0.0, "clusters_per_batch": 20}, CLUSTER_SPACE),
    Side("dgl-neighbor", "dgl", "neighbor", NEIGHBOR_DEFAULTS, NEIGHBOR_SPACE),
)}


def chosen(trials: Sequence[Curve], T: float | None) -> int | None:
    """The index of the trial tuning keeps: the least time to ``T``; trials that never reach it after every one
    that does, by best validation accuracy; ties to the earlier trial. None: no trials."""
    def key(i: int):
        hit = time_to(trials[i], T)
        best = best_val(trials[i])
        return (0, hit.train_s, i) if hit else (1, -(best if best is not None else -math.inf), i)

    return min(range(len(trials)), key=key) if trials else None


# ---------------------------------------------------------------------- the suite's choices
DATASETS = ("amazon-photo", "coauthor-cs", "flickr-ane", "blogcatalog", "facebook-page-page", "synthetic-1m")
QUICK_DATASETS = ("cora",)


@dataclass
class TTASettings:
    """``gnndist bench tta``'s choices (its flags: ``gnndist bench --help``)."""

    datasets: list[str] = field(default_factory=lambda: list(DATASETS))
    depths: list[int] = field(default_factory=lambda: [2, 4, 8, 16])
    sides: list[str] = field(default_factory=lambda: list(SIDES))
    seeds: int = 5
    budget_s: float = 60.0  # training seconds per run
    trials: int = 0  # random-search trials per side (0: the defaults only)
    threads: int = 2  # torch threads of every side
    hidden: int | None = None  # gnndist's width (None: full_graph_width, 256 for SAGE, 64 for GCNII)
    deep_model: str = "gcn2"  # gnndist's model from DEEP_FROM layers
    max_epochs: int = 100_000
    eval_every_s: float | None = None  # a mini-batch side's evaluations, training seconds apart (None: budget / 100)
    peers_venv: str | None = None  # the peers' venv (None: gnndist.bench.peer_env.default_venv())
    split_seed: int = 0  # the seed of the export's random split

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise UserError(msg)

        unknown = [s for s in self.sides if s not in SIDES]
        need(not unknown, f"--sides: unknown {', '.join(unknown)}; known: {', '.join(SIDES)}")
        need(bool(self.sides), "--sides needs at least one side")
        need(bool(self.datasets), "--datasets needs at least one dataset")
        need(all(d >= 1 for d in self.depths) and bool(self.depths), f"--depths must be >= 1, got {self.depths}")
        need(self.seeds >= 1, f"--seeds must be >= 1, got {self.seeds}")
        need(self.budget_s > 0, f"--budget-s must be > 0, got {self.budget_s}")
        need(self.trials >= 0, f"--trials must be >= 0, got {self.trials}")
        need(self.threads >= 1, f"--threads must be >= 1, got {self.threads}")
        need(self.eval_every_s is None or self.eval_every_s > 0, f"--eval-every-s must be > 0, got {self.eval_every_s}")

    @property
    def eval_every(self) -> float:
        return self.eval_every_s or self.budget_s / 100

    @classmethod
    def quick(cls, **given) -> TTASettings:
        """``--quick``: one small graph at L = 2, two seeds, a 5-second budget, no tuning (``given`` overrides)."""
        return cls(**{"datasets": list(QUICK_DATASETS), "depths": [2], "seeds": 2, "budget_s": 5.0, **given})


# ---------------------------------------------------------------------- runs, their rows and the summary
@dataclass
class Run:
    """One training run of one side: its curve and what it cost; ``status`` ``ok``, or why there is no curve."""

    dataset: str
    depth: int
    side: str
    config: str  # default | tuned | trial-<k>
    seed: int
    hyper: Hyper | None = None
    points: list[Point] = field(default_factory=list)
    setup_s: float | None = None  # the side's own set-up before its first step (model, sampler, clusters)
    partition_s: float | None = None  # gnndist: making the partition it trains on (once per dataset)
    train_s: float = 0.0
    epochs: float = 0.0
    steps: int = 0
    s_per_epoch: float | None = None
    eval_s: float = 0.0  # the shared evaluator's seconds over the run (outside its clock)
    evals: int = 0
    load_start: float | None = None
    load_end: float | None = None
    versions: dict = field(default_factory=dict)
    status: str = "ok"

    @property
    def trial(self) -> bool:
        return self.config.startswith("trial")


def run_columns(run: Run, T: float | None) -> dict:
    """The CSV row of a run against the target ``T``: time, epochs and steps to it, best validation and the test
    accuracy there."""
    hit, best = time_to(run.points, T), at_best_val(run.points)
    return {"dataset": run.dataset, "depth": run.depth, "side": run.side, "config": run.config, "seed": run.seed,
            "status": run.status, "hyper": run.hyper.label() if run.hyper else "",
            **(run.hyper.columns() if run.hyper else {}), "target": T if T is not None else "",
            "setup_s": _blank(run.setup_s), "partition_s": _blank(run.partition_s),
            "time_to_target_s": hit.train_s if hit else "", "epochs_to_target": hit.epoch if hit else "",
            "steps_to_target": hit.steps if hit else "", "train_s": run.train_s, "epochs": run.epochs,
            "steps": run.steps, "s_per_epoch": _blank(run.s_per_epoch), "best_val": best.val if best else "",
            "test_at_best_val": best.test if best else "", "best_at_s": best.train_s if best else "",
            "eval_s": run.eval_s, "evals": run.evals, "load_start": _blank(run.load_start),
            "load_end": _blank(run.load_end), "versions": " ".join(f"{k}={v}" for k, v in sorted(run.versions.items()))}


def _blank(v):
    return "" if v is None else v


def final_target(runs: Sequence[Run]) -> float | None:
    """T of a dataset and depth: over the final (non-trial) runs, grouped by side and config."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if not r.trial and r.points:
            groups.setdefault((r.side, r.config), []).append(best_val(r.points))
    return target(groups)


def summary_rows(runs: Sequence[Run], T: float | None, sides: Sequence[str] = ()) -> list[dict]:
    """Per side and config (trials left out; sides in the order of ``sides``, else as they ran; ``default`` before
    ``tuned``), over its seeds: time, epochs and steps to ``T``, s/epoch, best validation, test at the best
    validation, evaluation seconds, the load range; a side without runs, its reason."""
    out = []
    groups: dict[tuple[str, str], list[Run]] = {}
    order = {side: i for i, side in enumerate(sides)}
    for r in runs:
        order.setdefault(r.side, len(order))
        if not r.trial:
            groups.setdefault((r.side, r.config), []).append(r)
    for (side, config), rs in sorted(groups.items(), key=lambda g: (order[g[0][0]], g[0][1] != "default")):
        ok = [r for r in rs if r.status == "ok" and r.points]
        first = rs[0]
        row = {"dataset": first.dataset, "depth": first.depth, "side": side, "config": config,
               "hyper": ok[0].hyper.label() if ok and ok[0].hyper else "", "target": T if T is not None else "",
               "seeds": len(rs), "status": "ok" if ok else first.status}
        hits = [time_to(r.points, T) for r in ok]
        bests = [at_best_val(r.points) for r in ok]
        for name, s in (("time_to_target_s", spread([h.train_s if h else None for h in hits])),
                        ("epochs_to_target", spread([h.epoch if h else None for h in hits])),
                        ("steps_to_target", spread([h.steps if h else None for h in hits])),
                        ("test_at_best_val", spread([b.test for b in bests])),
                        ("best_val", spread([b.val for b in bests]))):
            row.update({name: _blank(s.median), f"{name}_min": _blank(s.lo), f"{name}_max": _blank(s.hi)})
        row["reached"] = sum(h is not None for h in hits)
        for name in ("s_per_epoch", "setup_s", "eval_s"):
            vals = [getattr(r, name) for r in ok if getattr(r, name) is not None]
            row[name] = statistics.median(vals) if vals else ""
        loads = [v for r in ok for v in (r.load_start, r.load_end) if v is not None]
        row.update(load_min=min(loads) if loads else "", load_max=max(loads) if loads else "")
        out.append(row)
    return out
