"""PNG figures drawn from a suite's CSV rows (matplotlib, Agg: no display needed).

Every figure plots the CSV's own numbers (the tests read them back from the axes) and
its title carries the 1-minute load average the rows were taken at.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gnndist.bench.common import BREAKDOWN

COLORS = {"aggregation_s": "#4c72b0", "dense_s": "#55a868", "comm_s": "#c44e52", "other_s": "#8c8c8c"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _load(rows: list[dict]) -> str:
    loads = [r["loadavg_1m"] for r in rows if r.get("loadavg_1m") is not None]
    if not loads:
        return ""
    lo, hi = min(loads), max(loads)
    return f"load {lo:.1f}" if lo == hi else f"load {lo:.1f}-{hi:.1f}"


def _title(ax, what: str, rows: list[dict]) -> None:
    r = rows[0]
    ax.set_title(f"{what}\n{r.get('dataset', '')} on {r.get('cores', '?')} cores / {r.get('device', '')}, "
                 f"{_load(rows)} (1-min avg)", fontsize=9)


def _label(r: dict) -> str:
    s = r["strategy"]
    return f"1.5d c={r['replication']}" if s == "1.5d" else s


def speedup(rows: list[dict]):
    """Speed-up vs P per strategy: median epoch time of 1d at the smallest P over each run's."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    base_rows = [r for r in rows if r["strategy"] == "1d"]
    p0 = min(r["P"] for r in base_rows)
    base = next(r["epoch_s"] for r in base_rows if r["P"] == p0)
    by = defaultdict(list)
    for r in rows:
        by[_label(r)].append((r["P"], base / r["epoch_s"]))
    for name, pts in sorted(by.items()):
        pts.sort()
        ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=name)
    ps = sorted({r["P"] for r in rows})
    ax.plot(ps, [p / p0 for p in ps], ls=":", color="k", label="ideal")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks P")
    ax.set_ylabel(f"speed-up vs 1d at P={p0}")
    ax.legend(fontsize=8)
    _title(ax, "strong scaling: median epoch time", rows)
    fig.tight_layout()
    return fig


def breakdown(rows: list[dict]):
    """Stacked bars: the median epoch's aggregation / dense / comm / other seconds per (P, strategy)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.5, 0.6 * len(rows) + 2), 4))
    labels = [f"P={r['P']}\n{_label(r)}" for r in rows]
    bottom = [0.0] * len(rows)
    for part in BREAKDOWN:
        vals = [1e3 * (r.get(part) or 0.0) for r in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, color=COLORS[part], label=part.removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot(range(len(rows)), [1e3 * r["median_epoch_s"] for r in rows], "k_", ms=18, label="epoch (measured)")
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("ms per epoch (rank 0)")
    ax.legend(fontsize=7)
    _title(ax, "where the median epoch's time goes", rows)
    fig.tight_layout()
    return fig


def bytes_per_rank(rows: list[dict]):
    """SpMM bytes sent per rank per epoch vs P (mean over ranks), measured and as gnndist.parts.simulate predicts."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    by = defaultdict(list)
    for r in rows:
        if r["P"] > 1:
            by[_label(r)].append(r)
    for i, (name, rs) in enumerate(sorted(by.items())):
        rs.sort(key=lambda r: r["P"])
        color = f"C{i}"
        ax.plot([r["P"] for r in rs], [r["bytes_per_rank"] / 2**20 for r in rs], marker="o", color=color,
                label=f"{name} measured")
        ax.plot([r["P"] for r in rs], [r["predicted_bytes_per_rank"] / 2**20 for r in rs], marker="x", ls="--",
                color=color, label=f"{name} simulate")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks P")
    ax.set_ylabel("MiB sent per rank per epoch (SpMMs, mean)")
    ax.legend(fontsize=7)
    _title(ax, "bytes per rank: measured vs predicted", rows)
    fig.tight_layout()
    return fig


def weak_time(rows: list[dict]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    rs = sorted(rows, key=lambda r: r["P"])
    bottom = [0.0] * len(rs)
    for part in BREAKDOWN:
        vals = [1e3 * (r.get(part) or 0.0) for r in rs]
        ax.bar([str(r["P"]) for r in rs], vals, bottom=bottom, color=COLORS[part], label=part.removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot([str(r["P"]) for r in rs], [1e3 * r["epoch_s"] for r in rs], "ko-", label="median epoch")
    ax.set_xlabel(f"ranks P ({rs[0].get('nodes_per_rank', '?'):,} nodes per rank)")
    ax.set_ylabel("ms per epoch")
    ax.legend(fontsize=7)
    _title(ax, "weak scaling (ideal: flat)", rows)
    fig.tight_layout()
    return fig


def partition_volume(rows: list[dict]):
    """Communication volume (halo rows) vs parts per method."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    by = defaultdict(list)
    for r in rows:
        by[r["method"]].append((r["P"], r["volume"]))
    for name, pts in sorted(by.items()):
        pts.sort()
        ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=name, ls="--" if name == "random" else "-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("parts P")
    ax.set_ylabel("communication volume (halo rows)")
    ax.legend(fontsize=7)
    _title(ax, "partition volume vs parts", rows)
    fig.tight_layout()
    return fig


def peer_time(rows: list[dict]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.barh([r["provider"] for r in rows], [1e3 * r["step_s"] for r in rows], color="#4c72b0")
    ax.set_xlabel("ms per training step (median)")
    _title(ax, "gnndist P=1 vs PyG, one process", rows)
    fig.tight_layout()
    return fig


def kernel_throughput(rows: list[dict]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    by = defaultdict(list)
    for r in rows:
        by[r["provider"]].append((r["width"], r["gb_per_s"]))
    for name, pts in sorted(by.items()):
        pts.sort()
        ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("feature width F")
    ax.set_ylabel("GB/s (minimum traffic)")
    ax.legend(fontsize=7)
    _title(ax, "aggregation (SpMM) throughput", rows)
    fig.tight_layout()
    return fig


def model_calibration(rows: list[dict]):
    """Modelled vs measured epoch time, one point per run (marker per dataset, colour per P), the diagonal drawn."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    pts = [r for r in rows if isinstance(r.get("model_epoch_s"), float) and r.get("epoch_s")]
    markers = dict(zip(sorted({r["dataset"] for r in pts}), "osD^vP*X"))
    colors = dict(zip(sorted({r["P"] for r in pts}), ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974")))
    for (name, P), group in sorted(_groups(pts).items()):
        ax.scatter([1e3 * r["epoch_s"] for r in group], [1e3 * r["model_epoch_s"] for r in group],
                   marker=markers[name], color=colors[P], label=f"{name} P={P}", s=22)
    if pts:
        vals = [1e3 * r[k] for r in pts for k in ("epoch_s", "model_epoch_s")]
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        ax.plot([lo, hi], [lo, hi], color="k", lw=1, label="modelled = measured")
        ax.plot([lo, hi], [1.5 * lo, 1.5 * hi], color="k", lw=0.5, ls=":")
        ax.plot([lo, hi], [lo / 1.5, hi / 1.5], color="k", lw=0.5, ls=":", label="x 1.5, / 1.5")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured ms per epoch (median)")
    ax.set_ylabel("modelled ms per epoch (gnndist.cost.step_time)")
    ax.legend(fontsize=6, ncol=2)
    names = sorted({r["dataset"] for r in pts or rows})
    _title(ax, "cost model vs measured epoch", [{**r, "dataset": ", ".join(names)} for r in pts or rows])
    fig.tight_layout()
    return fig


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    out = defaultdict(list)
    for r in rows:
        out[(r["dataset"], r["P"])].append(r)
    return out


FIGURES = {
    "strong": {"speedup": speedup, "breakdown": breakdown, "bytes": bytes_per_rank},
    "weak": {"time": weak_time},
    "partition": {"volume": partition_volume},
    "peer": {"time": peer_time},
    "kernels": {"throughput": kernel_throughput},
    "model": {"calibration": model_calibration},
}


def draw(suite: str, rows: list[dict], out: Path) -> list[Path]:
    """Every figure of ``suite`` as ``out/<suite>_<name>.png``; returns the paths."""
    plt = _pyplot()
    paths = []
    for name, fn in FIGURES.get(suite, {}).items():
        if not rows:
            continue
        fig = fn(rows)
        path = out / f"{suite}_{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------- tta
SIDE_COLORS = {"gnndist": "#4c72b0", "pyg-neighbor": "#dd8452", "pyg-cluster": "#55a868", "dgl-neighbor": "#c44e52"}


def _anytime(points: list[dict]) -> tuple[list[float], list[float]]:
    """(training seconds, best validation accuracy so far) of one run's evaluations in order."""
    ts, best, b = [], [], float("-inf")
    for p in sorted(points, key=lambda p: p["train_s"]):
        b = max(b, p["val"])
        ts.append(p["train_s"])
        best.append(b)
    return ts, best


def median_anytime(runs: list[tuple[list[float], list[float]]]) -> tuple[list[float], list[float]]:
    """The median over runs of their anytime curves (step functions), at every time any run was evaluated from
    the first time every run has a value."""
    import bisect
    import statistics

    runs = [r for r in runs if r[0]]
    if not runs:
        return [], []
    start = max(ts[0] for ts, _ in runs)
    grid = sorted({t for ts, _ in runs for t in ts if t >= start})
    return grid, [statistics.median(b[bisect.bisect_right(ts, t) - 1] for ts, b in runs) for t in grid]


def tta_anytime(points: list[dict], summary: list[dict]):
    """The anytime curves of one dataset and depth: best validation accuracy so far vs training seconds, every
    seed faint, the median over seeds bold, per side (tuned solid, default dashed); the target dotted."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    runs = defaultdict(list)
    for p in points:
        runs[(p["side"], p["config"], p["seed"])].append(p)
    by = defaultdict(list)
    for (side, config, _), pts in sorted(runs.items()):
        by[(side, config)].append(_anytime(pts))
    for (side, config), curves in sorted(by.items()):
        color, ls = SIDE_COLORS.get(side, "k"), "--" if config == "default" else "-"
        for ts, best in curves:
            ax.step(ts, best, where="post", color=color, ls=ls, lw=0.7, alpha=0.3)
        ts, med = median_anytime(curves)
        ax.step(ts, med, where="post", color=color, ls=ls, lw=2, label=f"{side} {config} ({len(curves)} seeds)")
    T = next((r["target"] for r in summary if isinstance(r.get("target"), float)), None)
    if T is not None:
        ax.axhline(T, color="k", ls=":", lw=1, label=f"target {T:.3f}")
    times = [p["train_s"] for p in points if p["train_s"] > 0]
    if times and max(times) > 20 * min(times):  # sides an order of magnitude apart: seconds on a log axis
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training seconds (evaluation and set-up excluded)")
    ax.set_ylabel("best validation accuracy so far")
    ax.legend(fontsize=7)
    loads = [v for r in summary for v in (r.get("load_min"), r.get("load_max")) if isinstance(v, (int, float))]
    r0 = (summary or points)[0]
    load = f", load {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    ax.set_title(f"time to accuracy: {r0['dataset']}, {r0['depth']} layers\n{r0.get('cores', '?')} cores{load} "
                 f"(1-min avg)", fontsize=9)
    fig.tight_layout()
    return fig


def tta_figures(curves: Path, summary: Path, out: Path) -> list[Path]:
    """``out/tta_<dataset>_L<depth>.png`` for every dataset and depth of ``tta_curves.jsonl`` (the targets and
    loads from ``tta_summary.csv``); returns the paths."""
    import json

    from gnndist.bench.common import read_csv

    plt = _pyplot()
    points = [json.loads(ln) for ln in Path(curves).read_text().splitlines() if ln.strip()]
    rows = read_csv(summary) if Path(summary).exists() else []
    paths = []
    for dataset, depth in sorted({(p["dataset"], p["depth"]) for p in points}):
        fig = tta_anytime([p for p in points if (p["dataset"], p["depth"]) == (dataset, depth)],
                          [r for r in rows if (r["dataset"], r["depth"]) == (dataset, depth)])
        path = out / f"tta_{dataset}_L{depth}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
