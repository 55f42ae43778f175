"""--auto-budget 4 (default) vs 0 (every candidate): seconds, candidates run, modelled epoch time, volume.

    python benchmarks/partition_budget.py cora,amazon-photo,coauthor-cs
"""

import sys
import time

from gnndist.datasets import load
from gnndist.partition import partition


def main(names: str) -> None:
    print("| graph | P | budget | candidates run | seconds | modelled epoch ms | vs every candidate | volume "
          "| chosen |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in names.split(","):
        data = load(name, root="/work/shared/data")
        for P in (8, 32):
            rows = []
            for b in (0, 4):
                t = time.perf_counter()
                r = partition(data, P, progress=False, auto_budget=b).report
                rows.append((b, len(r["auto"]["candidates"]), time.perf_counter() - t, r["modelled_epoch_s"],
                             r["comm_volume"], f"{r['backend']} {r['auto']['chosen']}"))
            full = rows[0][3]
            for b, k, s, m, v, c in rows:
                print(f"| {name} | {P} | {b} | {k} | {s:.1f} | {m * 1e3:.4f} | {m / full:.3f} | {v:,} | {c} |",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
