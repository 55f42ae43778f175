"""``simulate``'s CUDA training peak against the peaks ``scripts/gpu_check.sh`` measured on a GPU (issue 50).

``scripts/gpu_jobs.py`` trains a 2-layer GCN (``gnndist train --json``, 3 epochs) on METIS partitions of
``synthetic-200k-d20`` at 1 and 2 ranks and hidden 16 / 64 / 256, and records each rank's
``peak_memory_bytes`` (``torch.cuda.max_memory_allocated``) in ``jobs.json``. This script makes the same
partitions here (METIS is deterministic for a seed), reads each rank's counts (entries, boundary entries, rows,
halo and sent rows) and prints :func:`gnndist.parts.memory.training_peak` on ``cuda`` beside each measured peak,
with the floor the measurements put under the model (the median of measured - modelled without
``CUDA_BASE_BYTES``: how ``CUDA_BASE_BYTES`` was fitted).

    python benchmarks/cuda_memory_fit.py benchmarks/results/gpu-h200-2026-12-04/run2/jobs.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", help="jobs.json of scripts/gpu_jobs.py (its memory jobs)")
    ap.add_argument("--work", default=None, help="where the partitions are made (default: a temporary folder)")
    args = ap.parse_args()
    from gnndist.partition import load as load_part

    from gnndist.parts import memory as S

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
    from gpu_jobs import MEM_GRAPH

    runs = [r for r in json.load(open(args.jobs))["jobs"] if r["group"] == "memory" and r["rc"] == 0]
    if not runs:
        raise SystemExit(f"{args.jobs}: no memory job that ran")
    work = args.work or tempfile.mkdtemp(prefix="gnndist-cuda-memory-")
    rows = []
    for P in sorted({r["parts"] for r in runs}):
        d = os.path.join(work, f"mem-p{P}")
        if not os.path.exists(os.path.join(d, "META.json")):
            subprocess.run([sys.executable, "-m", "gnndist.cli", "partition", MEM_GRAPH, "--parts", str(P),
                            "--method", "metis", "--out", d], check=True, capture_output=True,
                           env=dict(os.environ, GNNDIST_DATA=os.path.join(work, "data")))
        for k in range(P):
            a, meta = load_part(d, k)
            n = len(a["rowptr"]) - 1
            counts = (len(a["col"]), int((np.asarray(a["col"]) >= n).sum()), n, len(a["halo_gid"]), len(a["send_idx"]))
            for r in (r for r in runs if r["parts"] == P):
                widths = [meta["F"], r["hidden"], meta["classes"]]
                measured = next(x["peak_memory_bytes"] for x in r["per_rank"] if x["rank"] == k)
                rows.append((P, k, r["hidden"], measured, S.training_peak(*counts, widths, device="cuda")))
    floor = statistics.median(m - (p - S.CUDA_BASE_BYTES) for *_, m, p in rows)
    print(f"{MEM_GRAPH}, GCN {meta['F']} -> hidden -> {meta['classes']}, fp32; MiB; "
          f"CUDA_BASE_BYTES {S.CUDA_BASE_BYTES / 2**20:.0f} (these runs put the floor at {floor / 2**20:.0f})")
    print(f"{'P':>2} {'rank':>4} {'hidden':>6} {'measured':>9} {'modelled':>9} {'error':>7}")
    for P, k, h, m, p in rows:
        print(f"{P:2d} {k:4d} {h:6d} {m / 2**20:9.1f} {p / 2**20:9.1f} {100 * (p / m - 1):+6.1f}%")
    errs = [abs(p / m - 1) for *_, m, p in rows]
    print(f"|error|: median {100 * statistics.median(errs):.1f} %, max {100 * max(errs):.1f} % over {len(rows)} ranks")


if __name__ == "__main__":
    main()
