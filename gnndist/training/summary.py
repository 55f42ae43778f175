"""What a run leaves: the per-epoch log (JSON lines, progress bar), the run's typed summary and its parts.

:class:`RunSummary` is one training run (:meth:`gnndist.training.trainer.Trainer.fit`); :class:`Summary`
is every run of :func:`gnndist.training.runs.fit_runs` with mean ± std. Both serialise with
``to_dict()`` into what ``--json`` prints (metric values keyed ``<split>_<metric>``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from gnndist import cost
from gnndist.dist.grid import ProcessGrid
from gnndist.dist.probe import cache_key, default_cache, read_cached
from gnndist.dist.timing import PARTS, peak_memory_bytes
from gnndist.tasks.metrics import SPLITS, metric_key

DIRECTIONS = ("fwd_sent", "fwd_received", "bwd_sent", "bwd_received")


@dataclass
class Best:
    """The epoch of best validation metric (the first maximum) and its train / val / test values; ``others``: the
    values of the task's further metrics at that epoch, by key (a link task's ``test_ap`` beside ``test_auc``)."""

    val: float = -1.0
    epoch: int = -1
    train: float = 0.0
    test: float = 0.0
    others: dict = field(default_factory=dict)


@dataclass
class RunSummary:
    """One training run: model selection, costs, per-layer bytes and strategies, per-rank measures."""

    metric: str
    best: Best
    epochs: int
    epochs_run: int
    final_loss: float | None
    epoch_time_s: float  # mean after the first epoch
    comm_bytes_per_epoch: int
    comm_bytes_per_layer: dict[str, dict[str, int]]
    predicted_bytes_per_layer: dict[str, dict[str, int]]
    strategies: dict[str, dict]
    per_rank: list[dict]
    breakdown_synchronised: bool
    nproc: int  # the number of ranks, under the name --json has printed since the start
    strategy: str
    model: str
    dataset: str | None
    # the cost model's epoch (gnndist.cost.run_time) for the layouts that ran, and the constants it used (their
    # name: a preset, or "probe"); None where it has none (see modelled_step)
    model_epoch_time_s: float | None = None
    model_network: str | None = None
    model_constants: dict | None = None
    precision: str = "fp32"  # --precision
    # fp16 only: the loss scale at the end and the steps skipped for an overflow (on every rank), else None
    loss_scale: dict | None = None
    history: list[dict] = field(default_factory=list, repr=False)  # one row per epoch (the JSON lines)

    def value(self, split: str) -> float:
        """The metric on ``split`` at the best epoch."""
        return getattr(self.best, split)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("best", "history")}
        return {**{metric_key(s, self.metric): self.value(s) for s in SPLITS}, **self.best.others,
                "best_epoch": self.best.epoch, **d}


@dataclass
class RunRecord:
    """One run of several: its seed, split and result."""

    run: int
    seed: int
    split: int | None
    summary: RunSummary

    def to_dict(self) -> dict:
        s = self.summary
        return {"run": self.run, "seed": self.seed, "split": self.split,
                **{metric_key(k, s.metric): s.value(k) for k in SPLITS}, "best_epoch": s.best.epoch,
                "epochs_run": s.epochs_run, "final_loss": s.final_loss}


@dataclass
class Summary:
    """Every run on one partition: the last run's costs, each run's metrics, and their mean ± std."""

    last: RunSummary
    runs: list[RunRecord]
    mean: dict[str, float]  # split -> mean over runs
    std: dict[str, float]  # split -> standard deviation over runs
    splits: str
    split_kind: str | None

    @property
    def metric(self) -> str:
        return self.last.metric

    def to_dict(self) -> dict:
        d = self.last.to_dict()
        for s in SPLITS:
            d[metric_key(s, self.metric)] = self.mean[s]
            d[metric_key(s, self.metric) + "_std"] = self.std[s]
        if len(self.runs) > 1:  # per run only
            for key in ("best_epoch", "epochs_run", "final_loss"):
                d.pop(key)
        return {**d, "runs": [r.to_dict() for r in self.runs], "splits": self.splits, "split_kind": self.split_kind}


class EpochLog:
    """Per-epoch reporting on rank 0: one JSON line per epoch (``--log-file``) and the progress bar.

    A context manager: the file and the bar are closed however the loop ends.
    """

    def __init__(self, path: str | None, progress: bool, total: int, initial: int, grid: ProcessGrid):
        self.history: list[dict] = []
        self._file = open(path, "a") if path and grid.is_main else None
        self._bar = None
        if grid.is_main and progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc="train", unit="epoch", leave=False,
                             disable=None)  # on a terminal only

    def __enter__(self) -> EpochLog:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar:
            self._bar.close()
        if self._file:
            self._file.close()

    def write(self, row: dict, val: float) -> None:
        self.history.append(row)
        if self._file:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        if self._bar:
            self._bar.set_postfix(loss=f"{row['loss']:.4f}", val=f"{val:.3f}")
            self._bar.update()


def global_bytes_per_tag(local: dict[str, dict[str, int]], grid: ProcessGrid) -> dict[str, dict[str, int]]:
    """Bytes summed over ranks, per tag (layer) and direction (collective: every rank runs the same model)."""
    tags = sorted(local)
    vec = torch.tensor([float(local[t].get(k, 0)) for t in tags for k in DIRECTIONS], dtype=torch.float64,
                       device=grid.device)
    grid.all_reduce_(vec)
    vals = vec.view(len(tags), len(DIRECTIONS)).long().tolist() if tags else []
    return {t: dict(zip(DIRECTIONS, row)) for t, row in zip(tags, vals)}


def strategy_report(graph) -> dict[str, dict]:
    """Per layer (tag): the layout that aggregated it, its replication and width, whether its SpMM had a
    backward in the last step (and ``auto``'s candidates)."""
    choices = graph.strategy.choices()
    out = {}
    for tag, call in sorted(graph.context.calls.items()):
        s = graph.strategy.layout_for(tag)
        out[tag] = {"strategy": s.name, "replication": s.replication, "width": call.width,
                    "backward": call.count > call.forward_only}
        if tag in choices:
            out[tag]["candidates"] = choices[tag]["candidates"]
            out[tag]["network"] = choices[tag]["network"]  # the cost model's constants the choice used
    return out


def modelled_step(graph, form: str | None, widths: tuple[int, ...], network: str) -> tuple[cost.StepTime | None,
                                                                                           cost.Network | None]:
    """The cost model's training step of this run (:func:`gnndist.cost.run_time`) and the constants it used
    (collective: one gather; call it once every layer has run).

    Every layer is modelled on the layout that ran it (``auto``'s per-layer choice), with every rank's
    counts of that layout (on several hosts, split into rows within and between hosts), in the order the
    layers first ran. The constants are those ``auto`` chose with,
    else ``network`` (``--network``): a preset by name, or ``probe``: this machine's probed constants at this
    world size where a probe stored them (:func:`gnndist.dist.probe.read_cached`, the default cache; a fixed
    layout never measures them). ``(None, None)`` without constants; ``(None, net)`` for a model the cost
    model does not describe (``form``, its spec's ``cost``, ``None``; a model the trainer was handed has no spec).
    """
    grid, strategy = graph.grid, graph.strategy
    tags = list(graph.context.calls)  # in the order the layers ran
    probe = read_cached(default_cache(), cache_key(grid.hosts, grid.device)) \
        if network == "probe" and grid.is_main else None
    layouts = [strategy.layout_for(t) for t in tags]
    split = grid.num_hosts > 1  # the rows within and between hosts of each layout (cost.on_hosts)
    mine = ([ly.load().as_array() for ly in layouts], int(torch.count_nonzero(graph.x)), probe,
            [ly.pairs(grid.world_size) for ly in layouts] if split else None)
    every = grid.all_gather_object(mine)
    used = [c["network"] for c in strategy.choices().values() if c.get("network")]
    net = cost.Network(**used[0]) if used else cost.NETWORKS.get(network) or every[0][2]
    if net is None:
        return None, None
    loads = [[cost.RankLoad.from_array(np.asarray(r[0][k])) for r in every] for k in range(len(tags))]
    if split:
        loads = [cost.on_hosts(lds, np.stack([r[3][k][0] for r in every]), np.stack([r[3][k][1] for r in every]),
                               grid.hosts) for k, lds in enumerate(loads)]
    density = sum(r[1] for r in every) / max(graph.num_nodes * graph.x.shape[1], 1)
    elem = graph.wire_itemsize(max((c.itemsize for c in graph.context.calls.values()), default=4))
    return cost.run_time(form, widths, loads, net, density, elem), net


def rank_report(graph, history: list[dict], step_bytes: dict[str, dict[str, int]]) -> tuple[list[dict], bool]:
    """Per rank (gathered): peak memory, SpMM bytes of the last training step, mean time breakdown after the
    first epoch; and whether the breakdown is exact (the device was synchronised at every phase: CPU, or
    CUDA under ``--profile``)."""
    grid = graph.grid
    steady = history[1:] or history
    parts = {f"{p}_s": sum(r[f"{p}_s"] for r in steady) / max(len(steady), 1) for p in PARTS} if history else {}
    spmm = [b for t, b in step_bytes.items() if t in graph.context.calls]  # not the gradient all-reduce
    mine = {"rank": grid.rank, "peak_memory_bytes": peak_memory_bytes(grid.device),
            "spmm_bytes_sent": sum(b.get("fwd_sent", 0) + b.get("bwd_sent", 0) for b in spmm),
            "spmm_bytes_received": sum(b.get("fwd_received", 0) + b.get("bwd_received", 0) for b in spmm), **parts}
    sync = grid.device.type != "cuda" or graph.context.timer.sync is not None
    return grid.all_gather_object(mine), sync
