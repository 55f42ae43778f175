"""The suites of ``gnndist bench``: each returns its rows (one per measurement) for the CSV.

    strong     fixed graph, P in --parts, every layout that fits P: median epoch time, its split into
               aggregation / dense / comm / other (synchronised exclusive timers, gnndist.timing),
               SpMM bytes per rank (measured, and gnndist.simulate's prediction), peak memory per rank
    weak       synthetic graphs of --nodes-per-rank x P nodes (fixed nodes and edges per rank), 1d
    partition  METIS (vol, cut, one balance constraint each) vs random across part counts: time to
               partition, volume, cut, max send / mean, imbalance; epoch time and peak memory per
               rank of training on the parts at --train-parts
    peer       gnndist on one rank vs a single-process PyG GCN (cached torch.sparse CSR, and
               edge_index), same model, data and optimiser, on --device: step time and (CUDA) memory
    kernels    the aggregation kernels vs torch.sparse.mm and PyG's SimpleConv (gnndist.bench.kernels)
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnndist.bench.common import BREAKDOWN, Rows, Settings, strategy_flags, strategy_runs, timing_columns, train


def _say(msg: str) -> None:
    print(f"bench: {msg}", flush=True)


def _data(name: str, root: str | None):
    from gnndist.datasets import load

    return load(name, root=root)


def _graph_columns(data) -> dict:
    return {"dataset": getattr(data, "name", None) or "graph", "nodes": int(data.num_nodes),
            "edges": int(data.edge_index.shape[1])}


def predicted_bytes(p, summary: dict) -> tuple[float, float]:
    """Mean and max over ranks of the SpMM bytes sent per epoch that :func:`gnndist.simulate.layouts` predicts.

    One forward + backward SpMM per layer, at the layer's width and with the layout the run used
    (per layer under ``auto``), on the same partition ``p``; the forward alone for a layer whose
    SpMM had no backward (a first GCN layer that aggregates the features before its linear map).
    """
    from gnndist.simulate import ELEM, layouts

    sent = np.zeros(p.book.parts)
    cache: dict[int, list] = {}
    for tag, info in summary["strategies"].items():
        w = info["width"]
        if w not in cache:
            cache[w] = layouts(p.csr, p.book.offsets, w, replication=range(2, p.book.parts))
        want = (info["strategy"], info.get("replication") or 1)
        match = [lay for lay in cache[w] if (lay.strategy, lay.replication) == want]
        if match and info.get("backward", True):
            sent += match[0].sent
        elif match:
            sent += np.array([ld.bytes(w, ELEM)["fwd_sent"] for ld in match[0].loads], dtype=np.int64)
    return float(sent.mean()), float(sent.max())


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
            pred_mean, pred_max = predicted_bytes(p, summary)
            chosen = ",".join(f"{v['strategy']}" + (f"/{v['replication']}" if (v.get("replication") or 1) > 1 else "")
                              for _, v in sorted(summary["strategies"].items()))
            rows.add(**g, model=s.model, hidden=s.hidden, layers=s.layers, P=P, strategy=strategy,
                     replication=c if strategy != "auto" else "", layers_chosen=chosen,
                     **timing_columns(summary, s.warmup), predicted_bytes_per_rank=pred_mean,
                     predicted_bytes_per_rank_max=pred_max)


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
        rows.add(**_graph_columns(data), nodes_per_rank=per_rank, model=s.model, hidden=s.hidden, layers=s.layers,
                 P=P, strategy="1d", **timing_columns(summary, s.warmup), predicted_bytes_per_rank=pred_mean,
                 predicted_bytes_per_rank_max=pred_max)


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
                cols.update(timing_columns(train(d, P, s, ["--strategy", "1d"]), s.warmup))
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


SUITES = {"strong": strong, "weak": weak, "partition": partition_suite, "peer": peer, "kernels": kernels}


def run_suite(name: str, s: Settings, rows: Rows) -> None:
    """Run suite ``name``, its partitions in ``s.work/<name>`` (kept) or a temporary folder (removed)."""
    if s.work is not None:
        (s.work / name).mkdir(parents=True, exist_ok=True)
        SUITES[name](s, rows, s.work / name)
        return
    with tempfile.TemporaryDirectory(prefix=f"gnndist-bench-{name}-") as work:
        SUITES[name](s, rows, Path(work))


__all__ = ["BREAKDOWN", "SUITES", "run_suite"]
