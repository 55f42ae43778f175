"""The suites of ``gnndist bench``: each returns its rows (one per measurement) for the CSV.

    strong     fixed graph, P in --parts, every layout that fits P: median epoch time, its split into
               aggregation / dense / comm / other (synchronised exclusive timers, gnndist.dist.timing),
               SpMM bytes per rank (measured, and gnndist.parts.simulate's prediction), peak memory per rank
    weak       synthetic graphs of --nodes-per-rank x P nodes (fixed nodes and edges per rank), 1d
    partition  METIS (vol, cut, one balance constraint each) vs random across part counts: time to
               partition, volume, cut, max send / mean, imbalance; epoch time and peak memory per
               rank of training on the parts at --train-parts
    peer       gnndist on one rank vs a single-process PyG GCN (cached torch.sparse CSR, and
               edge_index), same model, data and optimiser, on --device: step time and (CUDA) memory
    kernels    the aggregation kernels vs torch.sparse.mm and PyG's SimpleConv (gnndist.bench.kernels)
    model      the cost model beside measured epochs over a grid of graphs, models, widths, P and layouts
    tta        time to accuracy of gnndist's full-graph training against mini-batch peers (gnndist.bench.tta)

Every row with a measured epoch time also has the cost model's (``model_epoch_s`` and its parts,
:func:`gnndist.cost.step_time`) from the constants of the run (``auto``'s probe, else the probe
cached for this machine at that P), and ``model_ratio`` = modelled / measured.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from gnndist.bench.common import (
    BREAKDOWN,
    Rows,
    Settings,
    strategy_flags,
    strategy_runs,
    timing_columns,
    train,
    write_csv,
)


def _say(msg: str) -> None:
    print(f"bench: {msg}", flush=True)


def _data(name: str, root: str | None):
    from gnndist.datasets import load

    return load(name, root=root)


def _graph_columns(data) -> dict:
    return {"dataset": getattr(data, "name", None) or "graph", "nodes": int(data.num_nodes),
            "edges": int(data.edge_index.shape[1])}


def used_layouts(p, summary: dict) -> dict[str, tuple]:
    """Per layer (tag, in order): ``(layout, info)``, the :func:`gnndist.parts.simulate.layouts` entry of the layout
    the run used for it (per layer under ``auto``) at the layer's width, on the same partition ``p``, and
    the run's report of that layer (``summary["strategies"][tag]``)."""
    from gnndist.parts.simulate import layouts

    cache: dict[int, list] = {}
    out = {}
    for tag, info in sorted(summary["strategies"].items()):
        w = info["width"]
        if w not in cache:
            cache[w] = layouts(p.csr, p.book.offsets, w, replication=range(2, p.book.parts))
        want = (info["strategy"], info.get("replication") or 1)
        match = [lay for lay in cache[w] if (lay.strategy, lay.replication) == want]
        if match:
            out[tag] = (match[0], info)
    return out


def predicted_bytes(p, summary: dict) -> tuple[float, float]:
    """Mean and max over ranks of the SpMM bytes sent per epoch that :func:`gnndist.parts.simulate.layouts` predicts.

    One forward + backward SpMM per layer, at the layer's width and with the layout the run used
    (per layer under ``auto``), on the same partition ``p``; the forward alone for a layer whose
    SpMM had no backward (a first GCN layer that aggregates the features before its linear map).
    """
    from gnndist.parts.memory import ELEM

    sent = np.zeros(p.book.parts)
    for lay, info in used_layouts(p, summary).values():
        if info.get("backward", True):
            sent += lay.sent
        else:
            sent += np.array([ld.bytes(info["width"], ELEM)["fwd_sent"] for ld in lay.loads], dtype=np.int64)
    return float(sent.mean()), float(sent.max())


def run_network(summary: dict, P: int, device: str):
    """The cost model's constants of a run: those ``auto`` reported, else this machine's probe at ``P`` ranks
    (the cache every run of this bench shares, ``$GNNDIST_DATA/probe.json``); ``None`` when neither exists."""
    from gnndist.cost import Network
    from gnndist.dist.probe import default_cache, machine_key, read_cached

    for info in summary["strategies"].values():
        if info.get("network"):
            return Network(**info["network"])
    return read_cached(default_cache(), machine_key(P, device))


def model_columns(p, data, summary: dict, model: str, hidden: int, layers: int, net) -> dict:
    """The cost model's epoch time and its parts (:func:`gnndist.cost.step_time`) for a run: the layers of
    ``model`` at the data's widths, each on the layout the run used, with the constants ``net`` (each a
    ``net_<name>`` column, so the row can be modelled again); blank when the model does not describe
    ``model`` or there are no constants."""
    from gnndist import cost
    from gnndist.nn.models import model_spec
    from gnndist.partition import model_widths_of

    constants = cost.Network.constants()
    blank = {**{k: "" for k in cost.StepTime(0, 0, 0, 0, 0, 0, ()).columns()}, "model_network": "",
             **{f"net_{k}": "" for k in constants}}
    form = model_spec(model).cost  # None: a model the cost model does not describe
    if net is None or form is None:
        return blank
    widths = list(model_widths_of(data, hidden, layers))
    if data.y.dim() == 1 and widths[-1] == 2:
        widths[-1] = 1  # a binary task: one logit (gnndist.training.trainer.output_width)
    density = float((data.x != 0).sum().item()) / max(data.x.numel(), 1)
    used = used_layouts(p, summary)
    t = cost.run_time(form, tuple(widths), [lay.loads for lay, _ in used.values()], net, density)
    if t is None:  # a layer without its layout
        return blank
    return {**t.columns(), "model_network": net.name, **{f"net_{k}": getattr(net, k) for k in constants}}


def _partition(data, P: int, method: str, s: Settings, work: Path, objective: str = "vol", balance="auto"):
    """Partition ``data`` and save it under ``work``; ``(partition, dir, seconds)``."""
    from gnndist.partition import partition

    t0 = time.perf_counter()
    p = partition(data, P, method, objective, 0, balance, progress=False)
    seconds = time.perf_counter() - t0
    key = f"{method}-{objective}-{balance if isinstance(balance, str) else '+'.join(balance)}-p{P}".replace(":", "")
    d = p.save(work / key, dataset=getattr(data, "name", None) or "graph", progress=False)
    return p, d, seconds


# ---------------------------------------------------------------------- strong
def strong(s: Settings, rows: Rows, work: Path) -> None:
    name = s.dataset or ("synthetic-20k-d10" if s.quick else "ogbn-arxiv")
    data = _data(name, s.root)
    g = _graph_columns(data)
    for P in s.parts or ([1, 2, 4] if s.quick else [1, 2, 4, 8, 16]):
        p, d, _ = _partition(data, P, "metis", s, work)
        for strategy, c in strategy_runs(P):
            if s.strategies and strategy not in s.strategies:
                continue
            _say(f"strong: {g['dataset']} P={P} {strategy}" + (f" c={c}" if strategy == "1.5d" else ""))
            summary = train(d, P, s, strategy_flags(strategy, c))
            rows.add(**g, **_run_columns(p, data, summary, s, P, strategy, c, s.model, s.hidden))


def _chosen(summary: dict) -> str:
    return ",".join(f"{v['strategy']}" + (f"/{v['replication']}" if (v.get("replication") or 1) > 1 else "")
                    for _, v in sorted(summary["strategies"].items()))


def _run_columns(p, data, summary: dict, s: Settings, P: int, strategy: str, c: int, model: str, hidden: int) -> dict:
    """A training run's columns: measured times and bytes, predicted bytes, and the cost model's epoch beside them."""
    pred_mean, pred_max = predicted_bytes(p, summary)
    timing = timing_columns(summary, s.warmup)
    return {"model": model, "hidden": hidden, "layers": s.layers, "P": P, "strategy": strategy,
            "replication": c if strategy != "auto" else "", "layers_chosen": _chosen(summary),
            **timing, "predicted_bytes_per_rank": pred_mean, "predicted_bytes_per_rank_max": pred_max,
            **_modelled(p, data, summary, s, P, model, hidden, timing["epoch_s"])}


def _modelled(p, data, summary: dict, s: Settings, P: int, model: str, hidden: int, measured: float) -> dict:
    """:func:`model_columns` of a run with its constants (:func:`run_network`), and modelled / measured."""
    cols = model_columns(p, data, summary, model, hidden, s.layers, run_network(summary, P, s.device))
    m = cols["model_epoch_s"]
    return {**cols, "model_ratio": m / measured if isinstance(m, float) and measured else ""}


# ---------------------------------------------------------------------- weak
def weak(s: Settings, rows: Rows, work: Path, nodes_per_rank: int | None = None, degree: int = 10) -> None:
    from gnndist.datasets import synthetic

    per_rank = nodes_per_rank or (5_000 if s.quick else 250_000)
    for P in s.parts or ([1, 2, 4] if s.quick else [1, 2, 4, 8, 16]):
        data = synthetic(per_rank * P, avg_degree=degree, num_features=64, seed=0, name=f"synthetic-{per_rank}xP")
        p, d, _ = _partition(data, P, "metis", s, work)
        _say(f"weak: {per_rank:,} nodes per rank, P={P}")
        summary = train(d, P, s, ["--strategy", "1d"])
        pred_mean, pred_max = predicted_bytes(p, summary)
        timing = timing_columns(summary, s.warmup)
        rows.add(**_graph_columns(data), nodes_per_rank=per_rank, model=s.model, hidden=s.hidden, layers=s.layers,
                 P=P, strategy="1d", **timing, predicted_bytes_per_rank=pred_mean,
                 predicted_bytes_per_rank_max=pred_max,
                 **_modelled(p, data, summary, s, P, s.model, s.hidden, timing["epoch_s"]))


# ---------------------------------------------------------------------- partition
METHODS = (  # (label, method, objective, balance)
    ("metis-vol", "metis", "vol", "auto"),
    ("metis-cut", "metis", "cut", "auto"),
    ("metis-vol-nodes", "metis", "vol", ("nodes",)),
    ("metis-vol-edges", "metis", "vol", ("edges",)),
    ("metis-vol-train", "metis", "vol", ("train",)),
    ("random", "random", "vol", "auto"),
)


QUICK_TRAINED = ("metis-vol", "metis-cut", "random")  # --quick trains on these only


def partition_suite(s: Settings, rows: Rows, work: Path) -> None:
    name = s.dataset or ("coauthor-cs" if not s.quick else "synthetic-20k-d10")
    data = _data(name, s.root)
    g = _graph_columns(data)
    train_at = set(s.train_parts if s.train_parts is not None else ([4] if s.quick else [4, 8]))
    for P in s.parts or ([2, 4, 8, 16] if s.quick else [2, 4, 8, 16, 32, 64]):
        for label, method, objective, balance in METHODS:
            p, d, seconds = _partition(data, P, method, s, work, objective, balance)
            r = p.report
            cols = {"method": label, "P": P, "partition_s": round(seconds, 3), "volume": r["comm_volume"],
                    "edge_cut": r["edge_cut"], "vs_random": r["vs_random"],
                    "max_send_over_mean": r["max_send_over_mean"], "max_recv_over_mean": r["max_recv_over_mean"],
                    "imbalance_nodes": r["imbalance"]["nodes"], "imbalance_edges": r["imbalance"]["edges"],
                    "imbalance_train": r["imbalance"]["train"], "balance_used": ",".join(r.get("balance", []))}
            if P in train_at and (not s.quick or label in QUICK_TRAINED):
                _say(f"partition: {label} P={P}: training")
                summary = train(d, P, s, ["--strategy", "1d"])
                cols.update(timing_columns(summary, s.warmup))
                cols.update(_modelled(p, data, summary, s, P, s.model, s.hidden, cols["epoch_s"]))
            rows.add(**g, **cols)


# ---------------------------------------------------------------------- peer
def peer(s: Settings, rows: Rows, work: Path, reps: int | None = None) -> None:
    """gnndist P = 1 (``Trainer.train_step``) vs PyG GCNConv, one process, same model/optimiser/data."""
    from gnndist.bench.peer import gnndist_trainer, pyg_step, time_steps

    name = s.dataset or ("synthetic-20k-d10" if s.quick else "ogbn-arxiv")
    data = _data(name, s.root)
    device = torch.device(s.device)
    _, d, _ = _partition(data, 1, "random", s, work)
    reps = reps or max(s.epochs - s.warmup, 5)
    providers = {
        "gnndist": lambda: gnndist_trainer(d, s.hidden, s.layers, device).train_step,
        "pyg sparse_csr cached": lambda: pyg_step(data, s.hidden, s.layers, "sparse_csr", True, device),
        "pyg edge_index cached": lambda: pyg_step(data, s.hidden, s.layers, "edge_index", True, device),
    }
    base = None
    for provider, make in providers.items():
        _say(f"peer: {provider} on {device}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        step = make()
        times = time_steps(step, s.warmup, reps, device)
        med = statistics.median(times)
        base = base or med
        mem = round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else ""
        rows.add(**_graph_columns(data), model="gcn", hidden=s.hidden, layers=s.layers, provider=provider,
                 steps_timed=len(times), step_s=med, step_s_min=min(times), gnndist_speedup=med / base,
                 peak_memory_mb=mem)
        del step


# ---------------------------------------------------------------------- kernels
def kernels(s: Settings, rows: Rows, work: Path) -> None:
    from gnndist.bench.kernels import PEERS, power_law, providers, symmetric_csr, timed_all, traffic

    device = torch.device(s.device)
    nodes = 100_000 if s.quick else 1_000_000
    widths = [16, 64, 256] if s.quick else [16, 32, 64, 128, 256, 512]
    reps = 3 if s.quick else 5 if device.type == "cpu" else 20
    csr = symmetric_csr(*power_law(nodes)).to(device)
    csr.row, csr.transpose(), csr.row_order()  # build the caches outside the timings
    funcs = providers(csr, device)
    for width in widths:
        x = torch.randn(csr.num_cols, width, device=device)
        nbytes, flops = traffic(csr, width, x.dtype)
        seconds = {}
        for provider, fn in funcs.items():
            _say(f"kernels: power-law-{nodes // 1000}k F={width} {provider}")
            with torch.no_grad():
                seconds[provider] = min(timed_all(lambda fn=fn: fn(x), device, reps))
        best_peer = min(seconds[p] for p in PEERS if p in seconds)
        for provider, sec in seconds.items():
            rows.add(dataset=f"power-law-{nodes // 1000}k", nodes=csr.n_rows, edges=csr.nnz, width=width,
                     provider=provider, reps=reps, spmm_s=sec, gb_per_s=nbytes / sec / 1e9,
                     gflop_per_s=flops / sec / 1e9, vs_best_peer=best_peer / sec)


# ---------------------------------------------------------------------- model
MODEL_GRID = ("cora:gcn:16", "cora:gcn:128", "cora:sage:16", "synthetic-20k-d10:gcn:16", "synthetic-20k-d10:gcn:128",
              "synthetic-20k-d10:sage:128", "coauthor-cs:gcn:16", "amazon-photo:gcn:16", "fb100-cornell5:gcn:16",
              "cora:gcn:256", "synthetic-20k-d10:gcn:256")
QUICK_MODEL_GRID = ("cora:gcn:16", "synthetic-20k-d10:gcn:128")


def model_suite(s: Settings, rows: Rows, work: Path) -> None:
    """The cost model beside measured epochs: every case of ``--grid`` (dataset:model:hidden) at every P, on
    each layout that fits P (at P = 1 only ``auto``, which is ``1d`` there), ``auto`` first and with
    ``--reprobe``: its probe, taken beside the runs it models, gives the constants of every row of that case
    and P. A run that fails is tried once more."""
    from gnndist.errors import UserError

    cases = [_case(c) for c in s.grid or (QUICK_MODEL_GRID if s.quick else MODEL_GRID)]
    datasets, parts = {}, {}
    for name, model, hidden in cases:
        if name not in datasets:
            datasets[name] = _data(name, s.root)
        data = datasets[name]
        for P in s.parts or [1, 2, 4]:
            if (name, P) not in parts:
                parts[name, P] = _partition(data, P, "metis", s, work / name)
            p, d, _ = parts[name, P]
            runs = [("auto", 1)] + [r for r in strategy_runs(P) if r[0] != "auto" and P > 1]
            for strategy, c in runs:
                if s.strategies and strategy not in s.strategies and strategy != "auto":
                    continue
                _say(f"model: {name} {model} hidden {hidden} P={P} {strategy}"
                     + (f" c={c}" if strategy == "1.5d" else ""))
                flags = strategy_flags(strategy, c) + (["--reprobe"] if strategy == "auto" else [])
                try:
                    summary = train(d, P, replace(s, model=model, hidden=hidden), flags)
                except UserError as e:
                    _say(f"model: {e}; once more")
                    summary = train(d, P, replace(s, model=model, hidden=hidden), flags)
                rows.add(**_graph_columns(data), **_run_columns(p, data, summary, s, P, strategy, c, model, hidden))
                write_csv(s.out / "model.csv", rows.rows)  # as it goes: a long grid stopped early keeps its rows


def remodel(rows: list[dict], work: Path, probe_file: Path) -> list[dict]:
    """``model.csv`` rows with the cost model's columns computed again by the current :mod:`gnndist.cost`: each
    layer on the layout the run chose (``layers_chosen``), with the counts its partition stored (``META.json``
    ``layouts`` of ``work/<dataset>/metis-vol-auto-p<P>``) and the row's constants (its ``net_*`` columns), or for
    rows without them those of ``probe_file`` at that P.
    What a calibration of the model changes can so be read on runs already measured."""
    import numpy as np

    from gnndist import cost
    from gnndist.cost import RankLoad, model_widths
    from gnndist.dist.probe import read_cached
    from gnndist.nn.models import model_spec
    from gnndist.partition import read_meta

    out = []
    for r in rows:
        d = Path(work) / r["dataset"] / f"metis-vol-auto-p{r['P']}"
        meta = read_meta(d)
        x = np.load(d / "part-0" / "x.npy", mmap_mode="r")
        widths = list(model_widths(meta["F"], meta["classes"], r["hidden"], r["layers"]))
        if not meta["multilabel"] and widths[-1] == 2:
            widths[-1] = 1  # a binary task: one logit
        density = np.count_nonzero(x) / max(x.size, 1)
        loads = []
        for chosen in str(r["layers_chosen"]).split(","):
            c = chosen.split("/")[1] if "/" in chosen else "1"
            loads.append([RankLoad.from_array(a) for a in meta["layouts"][c]])
        if str(r.get("net_alpha", "")) != "":  # the row's own constants
            net = cost.Network.from_values(r.get("model_network") or "probe", r, prefix="net_")
        else:
            net = read_cached(probe_file, next(k for k in _probe_keys(probe_file) if k.endswith(f"|P={r['P']}")))
        t = cost.run_time(model_spec(r["model"]).cost, tuple(widths), loads, net, density)
        out.append({**r, **t.columns(), "model_ratio": t.total / r["epoch_s"]})
    return out


def _probe_keys(path: Path) -> list[str]:
    import json

    return [k for k in json.loads(Path(path).read_text()) if "|layouts" not in k]


def _case(text: str) -> tuple[str, str, int]:
    from gnndist.errors import UserError

    try:
        name, model, hidden = text.rsplit(":", 2)
        return name, model, int(hidden)
    except ValueError:
        raise UserError(f"--grid entries are DATASET:MODEL:HIDDEN, got {text!r}") from None


# ---------------------------------------------------------------------- tta
def tta_suite(s: Settings, rows: Rows, work: Path) -> None:
    """Time to accuracy, gnndist against the mini-batch peers (:mod:`gnndist.bench.tta`)."""
    from gnndist.bench.tta import tta

    tta(s, rows, work)


SUITES = {"strong": strong, "weak": weak, "partition": partition_suite, "peer": peer, "kernels": kernels,
          "model": model_suite, "tta": tta_suite}


def run_suite(name: str, s: Settings, rows: Rows) -> None:
    """Run suite ``name``, its partitions in ``s.work/<name>`` (kept) or a temporary folder (removed)."""
    if s.work is not None:
        (s.work / name).mkdir(parents=True, exist_ok=True)
        SUITES[name](s, rows, s.work / name)
        return
    with tempfile.TemporaryDirectory(prefix=f"gnndist-bench-{name}-") as work:
        SUITES[name](s, rows, Path(work))


__all__ = ["BREAKDOWN", "SUITES", "run_suite"]
