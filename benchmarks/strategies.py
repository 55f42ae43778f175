"""Epoch time and bytes of every aggregation strategy at one P, measured with ``gnndist run``, against 1d.

Each strategy trains the same model on the same cached partition (``gnndist run DATASET
--ranks P --strategy S``); the table gives the mean epoch time after the first epoch
(``epoch_time_s`` of the ``--json`` summary), the SpMM bytes per epoch summed over ranks
and per layer (measured by the byte counter, with the cost model's prediction beside them),
the ratio to ``1d``, and what ``auto`` chose per layer. The 1-minute load average is
printed with every row: on a shared machine, compare rows taken at similar load.

    python benchmarks/strategies.py ../shared/data/fb100_cornell5/Cornell5.mat --ranks 4
    python benchmarks/strategies.py cora --ranks 4 --quick
    python benchmarks/strategies.py coauthor-cs --ranks 4 --network ib    # other flags go to gnndist run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def strategies(ranks: int) -> list[list[str]]:
    out = [["--strategy", "1d"]]
    out += [["--strategy", "1.5d", "--replication", str(c)] for c in range(2, ranks) if ranks % c == 0]
    s = int(round(ranks**0.5))
    if s * s == ranks and ranks >= 4:
        out.append(["--strategy", "2d"])
    out.append(["--strategy", "auto"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--quick", action="store_true", help="10 epochs")
    args, extra = ap.parse_known_args()  # unknown flags go to gnndist run as they are
    epochs = 10 if args.quick else args.epochs
    gnndist = [sys.executable, "-m", "gnndist.cli"]
    rows = []
    for flags in strategies(args.ranks):
        cmd = gnndist + ["run", args.dataset, "--ranks", str(args.ranks), "--epochs", str(epochs), "--model",
                         args.model, "--hidden", str(args.hidden), "--json", "--no-progress", *flags,
                         *extra]
        load = os.getloadavg()[0]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(" ".join(cmd), "\n", r.stderr, file=sys.stderr)
            continue
        s = json.loads(r.stdout.strip().splitlines()[-1])
        layers = {t: v for t, v in s["comm_bytes_per_layer"].items() if t in s["strategies"]}
        spmm_bytes = sum(v["fwd_sent"] + v["bwd_sent"] for v in layers.values())
        predicted = sum(v["fwd_sent"] + v["bwd_sent"] for v in s["predicted_bytes_per_layer"].values())
        picks = ",".join(f"{v['strategy']}" + (f"(c={v['replication']})" if v["replication"] > 1 else "")
                         for _, v in sorted(s["strategies"].items()))
        rows.append((" ".join(flags[1:]), s["epoch_time_s"], spmm_bytes, predicted, picks, s["final_loss"], load))
    base = rows[0][1] if rows else 1.0
    print(f"{args.dataset}: {args.model}, hidden {args.hidden}, P = {args.ranks}, {epochs} epochs (gloo CPU ranks)")
    print(f"{'strategy':<18} {'ms/epoch':>9} {'vs 1d':>6} {'SpMM bytes/epoch':>17} {'predicted':>12} "
          f"{'final loss':>11} {'load':>5}  layers")
    for name, t, b, p, picks, loss, load in rows:
        print(f"{name:<18} {t * 1e3:>9.1f} {t / base:>6.2f} {b:>17,} {p:>12,} {loss:>11.6f} {load:>5.2f}  {picks}")


if __name__ == "__main__":
    main()
