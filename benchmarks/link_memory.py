"""A link epoch's per-rank peak against a node task's on the same partition, and the pairs' bytes per positive edge.

    gnndist synth synthetic-2m-d30 --out /tmp/sc/s2m --feature-dim 32
    gnndist partition /tmp/sc/s2m --parts 4 --edge-split 85,5,10 --out /tmp/sc/p4
    python benchmarks/link_memory.py /tmp/sc/p4 --ranks 4 [--gnndist /other/venv/bin/gnndist] [--decoder dot]

Both runs: ``gnndist train PART --ranks P --epochs E --hidden H --json`` (GCN, the node task on the split's
labels); each rank's peak is its resident high-water mark (``per_rank[].peak_memory_bytes``). The pairs' bytes are
the ``pairs`` and ``directory`` tags of ``comm_bytes_per_layer`` (sent, forward and backward) over the training
positives; ``--gnndist`` runs another installed gnndist (an older commit's, for a before / after). Beside them, rank
0's peaks as ``gnndist.parts.memory.training_peak`` predicts them from META.json's counts (the boundary's
transposed entries taken as every entry: an upper bound of the index term).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path


def run(gnndist: str, part: str, task: str, args) -> dict:
    """One ``gnndist train`` run's JSON report, with its wall time."""
    cmd = [gnndist, "train", part, "--task", task, "--ranks", str(args.ranks), "--epochs", str(args.epochs),
           "--hidden", str(args.hidden), "--json", "--no-progress"]
    if task == "link" and args.decoder:
        cmd += ["--decoder", args.decoder]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["wall_s"] = time.perf_counter() - t0
    return report


def pair_bytes(report: dict) -> int:
    """Bytes the pairs and the id directory sent in an epoch, forward and backward, all ranks together."""
    tags = report.get("comm_bytes_per_layer", {})
    return sum(tags.get(t, {}).get(k, 0) for t in ("pairs", "directory") for k in ("fwd_sent", "bwd_sent"))


def predicted(meta: dict, hidden: int) -> dict[str, int]:
    """Rank 0's predicted peaks, node and link (``gnndist.parts.memory.training_peak`` on the 1d layout's counts
    in META.json: a GCN of widths F, hidden, classes; the link encoder's F, hidden, hidden)."""
    from gnndist.parts.memory import LinkLoad, training_peak

    _sent, recv, _fs, _fr, _peers, nnz, rows, _c = meta["layouts"]["1"][0]
    link = LinkLoad.from_counts(meta["link"]["counts"], meta["link"]["metric"], meta["N"], meta["parts"], hidden)
    node = training_peak(nnz, nnz, rows, recv, _sent, [meta["F"], hidden, meta["classes"]])
    return {"node": node, "link": training_peak(nnz, nnz, rows, recv, _sent, [meta["F"], hidden, hidden], link=link)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", help="a partition with an edge split (gnndist partition ... --edge-split)")
    ap.add_argument("--gnndist", default=shutil.which("gnndist", path=str(Path(sys.executable).parent)) or "gnndist")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--decoder", default=None, help="--decoder of the link run (default: the split's)")
    ap.add_argument("--out", default=None, help="write the two reports and the summary here (JSON)")
    args = ap.parse_args(argv)
    meta = json.loads((Path(args.part) / "META.json").read_text())
    positives = meta["link"]["counts"]["train"][0]
    rows = {}
    for task in ("node", "link"):
        r = run(args.gnndist, args.part, task, args)
        peaks = [p["peak_memory_bytes"] for p in r["per_rank"]]
        rows[task] = {"peak_max_gib": max(peaks) / 2**30, "peaks": peaks, "epoch_s": r["epoch_time_s"],
                      "wall_s": r["wall_s"], "pair_bytes_per_positive": pair_bytes(r) / args.epochs / positives,
                      "report": r}
        print(f"{task}: per-rank peak {max(peaks) / 2**30:.2f} GiB (ranks {[round(p / 2**30, 2) for p in peaks]}), "
              f"epoch {r['epoch_time_s']:.1f} s, wall {r['wall_s']:.0f} s", flush=True)
    pred = predicted(meta, args.hidden)
    for task in ("node", "link"):
        rows[task]["predicted_gib"] = pred[task] / 2**30
        print(f"{task}: predicted (gnndist.parts.memory.training_peak, rank 0's counts) {pred[task] / 2**30:.2f} GiB")
    ratio = rows["link"]["peak_max_gib"] / rows["node"]["peak_max_gib"]
    print(f"link / node peak: {ratio:.2f}x; pairs + directory: {rows['link']['pair_bytes_per_positive']:.1f} B per "
          f"training positive per epoch ({positives:,} positives)")
    if args.out:
        Path(args.out).write_text(json.dumps({"ratio": ratio, "positives": positives, **rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
