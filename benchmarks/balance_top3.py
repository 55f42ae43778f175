"""``--balance auto`` against the other settings it considered: the top 3 by modelled epoch, each trained and timed.

    python benchmarks/balance_top3.py cora amazon-photo synthetic-20k-d10 --parts 4 --root /work/shared/data \
        --probe $GNNDIST_DATA/probe.json --out OUT

For each graph: ``partition(balance="auto", auto_budget=0)`` (METIS, every setting) on this machine's probed
constants at ``--parts`` ranks (the probe file's entry for this machine, as ``--partition-network probe``
reads it); then each of the 3 settings of least modelled epoch is made again alone (checked to model the same
epoch as in auto's list), saved, and trained ``--runs`` times with ``--strategy 1d`` (the median of the timed
epochs of each run). Writes ``OUT/balance_top3.json`` and prints a row per setting.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from gnndist.datasets import load
from gnndist.partition import model_widths_of, partition

from gnndist.bench.common import Settings, loadavg, timing_columns, train
from gnndist.dist.grid import host_identity
from gnndist.dist.probe import cache_key, default_cache, read_cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--root", default=None, help="dataset root (default: $GNNDIST_DATA)")
    ap.add_argument("--probe", default=None, help="probe file (default: <data root>/probe.json)")
    ap.add_argument("--runs", type=int, default=2, help="trainings per setting")
    ap.add_argument("--epochs", type=int, default=12, help="epochs per training, 2 of them warm-up")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out, P = Path(args.out), args.parts
    # P ranks on this machine, on the device the trainings take
    key = cache_key([host_identity()] * P, "cuda" if torch.cuda.is_available() else "cpu")
    net = read_cached(Path(args.probe) if args.probe else default_cache(), key)
    if net is None:
        raise SystemExit(f"no probe constants for {key}: run `gnndist train ... --ranks {P} --strategy auto` first")
    s = Settings(out=out, epochs=args.epochs, warmup=2, model="gcn", hidden=16, layers=2)
    rows = []
    for g in args.graphs:
        data = load(g, root=args.root)
        widths = model_widths_of(data, s.hidden, s.layers)
        auto = partition(data, P, "metis", balance="auto", progress=False, cost_network=net, widths=widths,
                         auto_budget=0).report["auto"]
        top = sorted(auto["candidates"], key=lambda c: c["modelled_epoch_s"])[:3]
        for i, c in enumerate(top):
            p = partition(data, P, c["method"], balance=c["balance"], progress=False, cost_network=net, widths=widths)
            same = abs(p.report["modelled_epoch_s"] - c["modelled_epoch_s"]) <= 1e-9 * c["modelled_epoch_s"]
            d = p.save(out / g / f"top{i + 1}", dataset=g)
            measured = [timing_columns(train(d, P, s, ["--strategy", "1d"]), s.warmup)["epoch_s"]
                        for _ in range(args.runs)]
            row = {"graph": g, "rank": i + 1, "balance": c["balance"], "chosen": c["balance"] == auto["chosen"],
                   "modelled_ms": 1e3 * c["modelled_epoch_s"], "same_as_in_auto": same,
                   "measured_ms": [round(1e3 * m, 2) for m in measured], "load": loadavg()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "balance_top3.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
