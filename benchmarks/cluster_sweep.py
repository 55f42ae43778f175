"""Every layout's epoch on emulated hosts at several link rates, beside the cost model's: the grid of issue 47.

For each rate: ``--strategy auto --reprobe`` first (it probes the links and stores the constants), then each fixed
layout (whose summaries carry the stored probe's ``model_epoch_time_s``), each one run of ``gnndist train PARTS``
on ``--hosts`` x ``--ranks-per-host`` emulated hosts (:class:`emulated_cluster.EmulatedCluster`, the same
namespaces and addresses every run). Prints a table row per rate: epoch (model error) per layout, ``auto``'s
layers and its epoch over the best fixed layout's; then the median |model / measured - 1|. Each run's summary
is appended to ``--out`` (JSON lines).

    python benchmarks/cluster_sweep.py --hosts 16 --rates 1gbit,none --layouts 1d,1.5d:2,2d,1.5d:8 \\
        --data /work/c47/data --out runs.jsonl /work/c47/cornell5-p16b -- --hidden 128 --epochs 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from emulated_cluster import EmulatedCluster


def strategy_args(layout: str) -> list[str]:
    """``1d``, ``2d``, ``auto`` or ``1.5d:C`` as ``gnndist train`` flags."""
    name, _, c = layout.partition(":")
    return ["--strategy", name] + (["--replication", c] if c else [])


def run_one(hosts: int, g: int, rate: str | None, partdir: str, layout: str, extra: list[str], data: str) -> dict:
    """One run; host 0's JSON summary with the run's load, or a dict with ``failed``."""
    args = ["train", partdir, *strategy_args(layout), *extra, "--no-progress", "--json"]
    if layout == "auto":
        args.append("--reprobe")
    with EmulatedCluster(hosts, g, rate, tag="47") as c:
        results = c.run(args, env={"GNNDIST_DATA": data}, timeout=1200)
    out = [ln for ln in results[0].stdout.splitlines() if ln.startswith("{")]
    if not out or any(r.returncode != 0 for r in results):
        return {"layout": layout, "failed": [r.returncode for r in results], "stderr": results[0].stderr[-2000:]}
    return {"layout": layout, "summary": json.loads(out[-1]), "load": os.getloadavg()[0]}


def cell(run: dict) -> str:
    js = run["summary"]
    e, m = js["epoch_time_s"], js.get("model_epoch_time_s")
    text = f"{e:.3f}" + (f" ({m / e - 1:+.0%})" if m else "")
    if run["layout"] == "auto":
        text += " " + "/".join(v["strategy"] + (f" c={v['replication']}" if v["strategy"] == "1.5d" else "")
                               for v in js["strategies"].values())
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--rates", default="100mbit,1gbit,none", help="comma-separated tc rates; none: unshaped")
    p.add_argument("--layouts", default="1d,1.5d:2,2d", help="the fixed layouts, after auto")
    p.add_argument("--data", default=os.environ.get("GNNDIST_DATA", "/tmp/gdc-data"), help="the jobs' data root")
    p.add_argument("--out", default=None, help="append every run's summary here (JSON lines)")
    p.add_argument("partdir", help="the partition (after the options)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then more gnndist train flags")
    a = p.parse_args()
    extra = a.extra[1:] if a.extra[:1] == ["--"] else a.extra
    fixed = a.layouts.split(",")
    print(f"| {a.hosts} x {a.ranks_per_host}, link | " + " | ".join(fixed) + " | auto (layers) | auto / best fixed |")
    print("|---|" + "---:|" * (len(fixed) + 2))
    errors, failed = [], 0
    for rate in a.rates.split(","):
        runs = [run_one(a.hosts, a.ranks_per_host, None if rate == "none" else rate, a.partdir, lay, extra, a.data)
                for lay in ["auto", *fixed]]
        for r in runs:
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps({"hosts": a.hosts, "g": a.ranks_per_host, "rate": rate, "at": time.time(), **r})
                            + "\n")
            if "summary" in r and r["summary"].get("model_epoch_time_s"):
                errors.append(abs(r["summary"]["model_epoch_time_s"] / r["summary"]["epoch_time_s"] - 1))
        ok = {r["layout"]: r for r in runs if "summary" in r}
        failed += len(runs) - len(ok)
        best = min((ok[k]["summary"]["epoch_time_s"] for k in fixed if k in ok), default=None)
        ratio = (f"{ok['auto']['summary']['epoch_time_s'] / best:.2f}" if "auto" in ok and best else "-")
        cells = [cell(ok[k]) if k in ok else "failed" for k in fixed]
        print(f"| {rate} | " + " | ".join(cells) + f" | {cell(ok['auto']) if 'auto' in ok else 'failed'} | {ratio} |",
              flush=True)
    if errors:
        print(f"model median |error| {statistics.median(errors):.1%} over {len(errors)} runs, max {max(errors):.1%}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
