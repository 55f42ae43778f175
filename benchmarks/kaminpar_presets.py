"""KaMinPar's presets, compression and threads: time, peak memory, edge cut and halo volume per graph.

    python benchmarks/kaminpar_presets.py --graphs coauthor-cs,amazon-photo,fb100-cornell5,soc-slashdot0902 \
        --root /work/shared/data --presets default,fast,terapart --threads 1,2 --parts 4,8 --json out.json
    gnndist synth synthetic-1m-d20 --out /tmp/s1m20 --feature-dim 8
    python benchmarks/kaminpar_presets.py --graphs /tmp/s1m20 --compress on,off --parts 4 --json out.json

Every (graph, P, preset, compression, threads) runs in a fresh process (``--per-graph``: one process per graph,
each setting ``--repeat`` times in it), as the pipeline runs the backend:
the graph loaded (:func:`gnndist.datasets.load`), symmetrised (the pipeline's ``symmetrise`` stage), then
one :class:`~gnndist.partition.backends.KaMinPar` call at that preset with ``--balance nodes``'s request (every
node weighs 1, tolerance 1.03), and its parts weighed by the pipeline's ``plans`` stage (the 1D halo exchange:
halo volume = rows every part receives, summed; the edge cut). The parts are the partitioner's own, before the
refinement. Per run: the call's wall and CPU seconds, its peak above the resident set before it (VmHWM reset
with ``clear_refs`` just before the call), the process's peak (the larger of the load-and-symmetrise peak and
the call's), the 1-minute load before and after. ``--compress rule`` is the backend's size rule (compressed
above ``KAMINPAR_COMPRESS_ENTRIES``); ``on``/``off`` force it. A markdown table goes to stdout, every run
to ``--json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace

COMPRESS = {"rule": None, "on": True, "off": False}


def settings(args: argparse.Namespace) -> list[tuple[int, str, str, int]]:
    """Every (P, preset, compression, threads) asked, terapart only compressed (it runs on nothing else)."""
    return [(p, pr, c, t) for p, pr, c, t in itertools.product(args.parts, args.presets, args.compress, args.threads)
            if not (pr == "terapart" and c == "off")]


def runs_here(args: argparse.Namespace) -> list[dict]:
    """Every setting of :func:`settings` on one graph in this process: load and symmetrise once, then each
    KaMinPar call ``--repeat`` times, its peak measured from a VmHWM reset just before it."""
    import numpy as np
    from gnndist.datasets import load
    from gnndist.partition.backends import KaMinPar, Request
    from gnndist.partition.pipeline import plans, request, symmetrise

    from gnndist.machine import pin_mmap_threshold, reset_rss_peak, rss_now, rss_peak

    pin_mmap_threshold()  # as the pipeline does before its stages
    data = load(args.graph, root=args.root)
    req = request(data, args.parts[0], "kaminpar", balance="nodes", threads=args.threads[0])
    csr = symmetrise(req)
    load_peak, out = rss_peak(), []
    for parts, preset, compress, threads in settings(args):
        for _ in range(args.repeat if args.per_graph else 1):
            kmp = KaMinPar(preset, COMPRESS[compress])
            choice = kmp.choice(csr.nnz)
            load0, before, reset = os.getloadavg()[0], rss_now(), reset_rss_peak()
            cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            assign = kmp.assign(csr, Request(parts, None, None, req.seed, threads=threads))
            seconds, cpu1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
            call_peak = rss_peak()
            _, loads, cut = plans(replace(req, parts=parts), csr, assign)
            sizes = np.bincount(assign, minlength=parts)
            out.append({
                "graph": args.graph, "nodes": int(csr.num_nodes), "entries": int(csr.nnz), "parts": parts,
                "preset": choice.preset, "compressed": choice.compress, "why": choice.why, "threads": threads,
                "seconds": round(seconds, 3),
                "cpu_seconds": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 3),
                "call_peak_above_bytes": call_peak - before if reset else None,
                "process_peak_bytes": max(load_peak, call_peak), "rss_before_bytes": before,
                "edge_cut": int(cut), "halo_volume": int(sum(ld.expand_recv for ld in loads)),
                "node_imbalance": float(sizes.max() / sizes.mean()), "fresh_process": not args.per_graph,
                "load_before": load0, "load_after": os.getloadavg()[0],
            })
    return out


def row(r: dict) -> str:
    """One run as a row of the markdown table."""
    call = r["call_peak_above_bytes"] if r["call_peak_above_bytes"] is not None else float("nan")
    return (f"| {os.path.basename(r['graph'].rstrip('/'))} | {r['entries']:,} | {r['parts']} | {r['preset']} | "
            f"{'yes' if r['compressed'] else 'no'} | {r['threads']} | {r['load_before']:.1f}-{r['load_after']:.1f} | "
            f"{r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {call / 2**20:.0f} | {r['process_peak_bytes'] / 2**20:.0f} "
            f"| {call / r['entries']:.1f} | {r['edge_cut']:,} | {r['halo_volume']:,} |")


def summary(runs: list[dict]) -> str:
    """The runs grouped by (graph, P, preset, compression, threads): medians, and the halo volume over the
    ``default`` preset's (uncompressed where it ran so, at the same graph, P and threads)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["graph"], r["parts"], r["preset"], r["compressed"], r["threads"]), []).append(r)
    med = lambda key, rs: statistics.median(r[key] for r in rs)  # noqa: E731
    lines = ["| graph | entries | P | preset | compressed | threads | runs | load | CPU s | wall s | call peak "
             "B/entry | halo volume | vs default |", "|---|---:|---:|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for (g, p, pr, c, t), rs in groups.items():
        base = [groups[k] for k in ((g, p, "default", False, t), (g, p, "default", True, t)) if k in groups]
        peaks = [r["call_peak_above_bytes"] for r in rs if r["call_peak_above_bytes"] is not None]
        vs = med("halo_volume", rs) / med("halo_volume", base[0]) if base else float("nan")
        peak = max(peaks) / rs[0]["entries"] if peaks else float("nan")
        loads = f"{min(r['load_before'] for r in rs):.0f}-{max(r['load_after'] for r in rs):.0f}"
        lines.append(f"| {os.path.basename(g.rstrip('/'))} | {rs[0]['entries']:,} | {p} | {pr} | "
                     f"{'yes' if c else 'no'} | {t} | {len(rs)} | {loads} | {med('cpu_seconds', rs):.2f} | "
                     f"{med('seconds', rs):.2f} | {peak:.1f} | {med('halo_volume', rs):,.0f} | {vs:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="", help="comma-separated dataset names or .npy folders")
    ap.add_argument("--root", default=None, help="dataset root (e.g. /work/shared/data)")
    ap.add_argument("--presets", default="default,fast,terapart", help="KaMinPar presets (default: the three)")
    ap.add_argument("--compress", default="rule", help="comma list of rule (the backend's size rule), on, off")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--parts", default="4,8", help="part counts (default 4,8)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per setting (default 1)")
    ap.add_argument("--per-graph", action="store_true",
                    help="one process per graph, every setting in it (small graphs: the interpreter's start and the "
                         "load once; the call's peak is then over what the earlier calls left resident)")
    ap.add_argument("--json", default=None, help="write every run here (a JSON list; appended to if it exists)")
    ap.add_argument("--summary", action="store_true", help="print the table of --json's runs (medians) and exit")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one run, JSON on stdout
    args = ap.parse_args()
    for flag in ("presets", "compress", "threads", "parts"):
        setattr(args, flag, getattr(args, flag).split(","))
    bad = [c for c in args.compress if c not in COMPRESS]
    if bad:
        ap.error(f"--compress takes rule, on or off, got {','.join(bad)}")
    args.threads, args.parts = [int(t) for t in args.threads], [int(p) for p in args.parts]
    if args.summary:
        print(summary(json.load(open(args.json))))
        return
    if args.one:
        args.graph = args.graphs
        for r in runs_here(args):
            print(json.dumps(r))
        return
    runs = json.load(open(args.json)) if args.json and os.path.exists(args.json) else []
    print("| graph | entries | P | preset | compressed | threads | load | s | CPU s | call peak MiB | process peak "
          "MiB | B/entry (call) | edge cut | halo volume |\n|---|---:|---:|---|---|---:|---|---:|---:|---:|---:|"
          "---:|---:|---:|", flush=True)
    flags = {"--presets": args.presets, "--compress": args.compress, "--threads": args.threads, "--parts": args.parts}
    for graph in args.graphs.split(","):
        jobs = ([flags] if args.per_graph else
                [{"--parts": [p], "--presets": [pr], "--compress": [c], "--threads": [t]}
                 for p, pr, c, t in settings(args) for _ in range(args.repeat)])
        for job in jobs:
            cmd = [sys.executable, __file__, "--one", "--graphs", graph, "--repeat", str(args.repeat),
                   *(["--per-graph"] if args.per_graph else []), *(["--root", args.root] if args.root else []),
                   *itertools.chain.from_iterable((k, ",".join(map(str, v))) for k, v in job.items())]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"| {graph} | {job} failed: {(out.stderr.strip().splitlines() or [out.returncode])[-1]} |",
                      flush=True)
                continue
            for line in out.stdout.strip().splitlines():
                if line.startswith("{"):
                    runs.append(json.loads(line))
                    print(row(runs[-1]), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
