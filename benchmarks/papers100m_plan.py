"""The ogbn-papers100M plan from a measured end-to-end run: partition peak and time, and per-rank memory.

    python benchmarks/papers100m_plan.py \
        --partition-report benchmarks/results/papers100m-plan-2026-12-04/report-s2m25.json \
        --wall 66.98 --peak-kb 1388004 [--train-report train.json] [--cores 64] [--parts 8,16,64]

Inputs are what one measured partition run wrote: the ``gnndist partition --json`` report (its ``stages``:
seconds and peak per stage, and ``comm_volume``, ``num_nodes``, ``num_edges``, ``cost_model.widths``), the
partition's wall seconds and peak RSS from ``/usr/bin/time -v``, and optionally the ``gnndist train --json``
report (its per-rank peaks). Today's inputs are the 49.7M-entry run of ``benchmarks/README.md`` ("Issue 49",
"50M entries (C)": int32 ids on disk, the lean stages, KaMinPar's terapart preset compressed, P = 4, 2 threads).
Every papers100M figure is a linear extrapolation from that one run; nothing else is assumed but what the
output says:

* partition peak: the interpreter's fixed bytes (``--base-gib``) plus the run's bytes per adjacency
  entry above them, times papers100M's entries; and each stage's peak the same way;
* partition time: every stage's measured seconds per entry times papers100M's entries, as run here
  ("as here": the same cores), and with the threaded stages (symmetrise, the partitioner and the
  refinement: the ``assign`` stage) sped up linearly from the run's threads to ``--cores`` (a
  lower bound: nothing scales perfectly); the rest of the run (load, layouts, part writes) scaled by the
  features' bytes (N x F) too, since the part writes gather every feature row;
* per-rank training memory: :func:`gnndist.parts.memory.training_peak` (the model ``gnndist simulate``
  prints as ``peak_memory_per_rank``) with papers100M's rows and entries split evenly over P and the
  halo at 0 (the floor) and at the run's halo rows per owned row (a synthetic graph with little
  locality; a citation graph partitioned by METIS has far less), 1D layout, GCN 128 -> hidden -> 172.
"""

from __future__ import annotations

import argparse
import json

from gnndist.parts.memory import training_peak

PAPERS = {"nodes": 111_059_956, "entries": 3_231_371_744, "features": 128, "classes": 172}  # OGB's counts, symmetrised
THREADED = ("symmetrise", "assign")


def last_json(path: str) -> dict:
    lines = [ln for ln in open(path).read().splitlines() if ln.strip().startswith("{")]
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partition-report", required=True, help="gnndist partition --json output of the measured run")
    ap.add_argument("--wall", type=float, required=True, help="the partition's wall seconds (/usr/bin/time -v)")
    ap.add_argument("--peak-kb", type=int, required=True, help="its maximum resident set size in KB (/usr/bin/time -v)")
    ap.add_argument("--train-report", help="gnndist train --json output of the same graph (per-rank peaks)")
    ap.add_argument("--base-gib", type=float, default=0.484,
                    help="the interpreter's fixed resident GiB (default 0.484: 496 MiB, torch and PyG imported, "
                         "measured before any array in issue 49)")
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--parts", default="8,16,64")
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()

    r = last_json(args.partition_report)
    entries, n, threads = int(r["num_edges"]) * 2, int(r["num_nodes"]), int(r["threads"])
    stages = {s["stage"]: s["seconds"] for s in r["stages"]}
    stages["save and the rest"] = args.wall - sum(stages.values())
    base = args.base_gib * 2**30
    peak = args.peak_kb * 1024
    per_entry = (peak - base) / entries
    scale = PAPERS["entries"] / entries
    print(f"measured: {n:,} nodes, {entries:,} entries, {threads} threads, wall {args.wall:.0f} s, "
          f"peak {peak / 2**30:.2f} GiB = {peak / entries:.1f} B/entry ({per_entry:.1f} above {args.base_gib} GiB)")
    print("\n| stage | measured s | us / entry | papers100M as here | papers100M, threaded stages on "
          f"{args.cores} cores |\n|---|---:|---:|---:|---:|")
    here = fast = 0.0
    for name, sec in stages.items():
        t = sec * scale
        f = t * threads / args.cores if name in THREADED else t
        here, fast = here + t, fast + f
        print(f"| {name} | {sec:.1f} | {sec / entries * 1e6:.2f} | {t / 3600:.2f} h | {f / 3600:.2f} h |")
    print(f"| **total** | {args.wall:.0f} | {args.wall / entries * 1e6:.2f} | {here / 3600:.1f} h "
          f"| {fast / 3600:.1f} h |")
    rest = stages["save and the rest"] * PAPERS["nodes"] * PAPERS["features"] / (n * int(r["cost_model"]["widths"][0]))
    print(f"(the rest scaled by the features' bytes, N x F, not the entries: {rest / 3600:.2f} h, "
          f"total as here {(here - stages['save and the rest'] * scale + rest) / 3600:.1f} h)")
    print(f"\npartition peak for papers100M: {(base + per_entry * PAPERS['entries']) / 2**30:.0f} GiB "
          f"(the fixed {args.base_gib} GiB + {per_entry:.1f} B x {PAPERS['entries']:,} entries)")
    print("\n| stage | peak after it, measured | B / entry above the interpreter | papers100M |\n|---|---:|---:|---:|")
    for st in r["stages"]:
        above = (st["peak_bytes"] - base) / entries
        print(f"| {st['stage']} | {st['peak_bytes'] / 2**30:.2f} GiB | {above:.1f} | "
              f"{(base + above * PAPERS['entries']) / 2**30:.0f} GiB |")

    halo_ratio = int(r["comm_volume"]) / n  # halo rows received per owned row, summed over ranks
    if args.train_report:
        t = last_json(args.train_report)
        peaks = [p["peak_memory_bytes"] for p in t.get("per_rank", [])]
        if peaks:
            print(f"measured training peaks per rank: {', '.join(f'{p / 2**30:.2f}' for p in peaks)} GiB")
    widths = (PAPERS["features"], args.hidden, PAPERS["classes"])
    print(f"\nper-rank training memory, GCN {widths[0]} -> {widths[1]} -> {widths[2]}, 1D "
          f"(gnndist.parts.memory.training_peak), halo 0 and {halo_ratio:.2f} x owned rows (the measured run's):")
    print("\n| P | rows / rank | entries / rank | halo 0 | halo measured ratio |\n|---:|---:|---:|---:|---:|")
    for p in (int(x) for x in args.parts.split(",")):
        rows, nnz = PAPERS["nodes"] // p, PAPERS["entries"] // p
        lo = training_peak(nnz, nnz // 2, rows, 0, 0, widths)
        halo = int(halo_ratio * rows)
        hi = training_peak(nnz, nnz // 2, rows, halo, halo, widths)
        print(f"| {p} | {rows:,} | {nnz:,} | {lo / 2**30:.1f} GiB | {hi / 2**30:.1f} GiB |")
    print("\n(transposed boundary patterns taken as half the entries; the measured run's share is in its report)")


if __name__ == "__main__":
    main()
