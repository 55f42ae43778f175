"""Accuracy by each benchmark's own protocol: gnndist's mean ± std beside the published number.

Every row is one ``gnndist run`` command (one partition, one process group, all runs), whose
``--json`` summary gives each run and the mean ± std of the dataset's standard metric:

    heterophily (Platonov et al., ICLR 2023)   --splits all: the 10 shipped splits, ROC-AUC (tolokers, minesweeper)
    Planetoid (Kipf & Welling, ICLR 2017)      public split, --runs 10 seeds, accuracy
    Amazon / Coauthor (Shchur et al. 2018)     --splits random --runs 10: 20/30 per class, the rest test, accuracy

Rows whose files are not under ``--root`` are listed as missing (CiteSeer and Tolokers are
held out of ``../shared/data``; PubMed there lacks ``allx``).

    python benchmarks/protocols.py --nproc 2                       # every row
    python benchmarks/protocols.py --rows minesweeper-gcn,cora-gcn --nproc 2 --epochs 100
    python benchmarks/protocols.py --quick                         # minesweeper + cora, 3 runs, 50 epochs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name -> (dataset, files under --root that must exist, protocol flags, recipe flags, published mean, std, source)
HETERO = ["--splits", "all", "--hidden", "64", "--lr", "0.01", "--dropout", "0.5"]
SHCHUR = ["--splits", "random", "--runs", "10"]
ROWS: dict[str, tuple] = {
    "tolokers-gcn": ("tolokers", "tolokers/tolokers.npz", HETERO, ["--model", "gcn"], 83.64, 0.67, "Platonov et al. 2023"),
    "tolokers-sage": ("tolokers", "tolokers/tolokers.npz", HETERO, ["--model", "sage"], 82.43, 0.44,
                      "Platonov et al. 2023"),
    "minesweeper-gcn": ("minesweeper", "minesweeper/minesweeper.npz", HETERO, ["--model", "gcn"], 89.75, 0.52,
                        "Platonov et al. 2023"),
    "minesweeper-sage": ("minesweeper", "minesweeper/minesweeper.npz", HETERO, ["--model", "sage"], 93.51, 0.57,
                         "Platonov et al. 2023"),
    "cora-gcn": ("cora", None, ["--runs", "10"], ["--model", "gcn"], 81.5, None, "Kipf & Welling 2017"),
    "citeseer-gcn": ("citeseer", "citeseer/ind.citeseer.x", ["--runs", "10"], ["--model", "gcn"], 70.3, None,
                     "Kipf & Welling 2017"),
    "pubmed-gcn": ("pubmed", "pubmed/ind.pubmed.allx", ["--runs", "10"], ["--model", "gcn"], 79.0, None,
                   "Kipf & Welling 2017"),
    "photo-gcn": ("amazon-photo", "amazon_photo/amazon_photo.npz", SHCHUR,
                  ["--model", "gcn", "--hidden", "64", "--no-normalize-features"], 91.2, 1.2, "Shchur et al. 2018"),
    "cs-gcn": ("coauthor-cs", "coauthor_cs/coauthor_cs.npz", SHCHUR, ["--model", "gcn"], 91.1, 0.5,
               "Shchur et al. 2018"),
}


def command(row: str, root: str, nproc: int, epochs: int, runs: int | None) -> list[str]:
    dataset, _, protocol, recipe, *_ = ROWS[row]
    protocol = list(protocol)
    if runs is not None and "--runs" in protocol:
        protocol[protocol.index("--runs") + 1] = str(runs)
    root_flag = [] if dataset == "cora" else ["--root", root]  # Cora is bundled
    return ["gnndist", "run", dataset, *root_flag, "--nproc", str(nproc), "--epochs", str(epochs), *protocol, *recipe]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma list of rows (default: every row)")
    ap.add_argument("--root", default=os.environ.get("GNNDIST_SHARED_DATA", "/work/shared/data"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--runs", type=int, default=None, help="override --runs of the seed/random-split protocols")
    ap.add_argument("--quick", action="store_true", help="minesweeper-gcn and cora-gcn, 3 runs, 50 epochs")
    ap.add_argument("--json", help="append each row's summary (one JSON line) to this file")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.epochs, args.runs = "minesweeper-gcn,cora-gcn", 50, 3
    cache = tempfile.mkdtemp(prefix="gnndist-protocols-")  # partitions of this run only
    table = []
    for row in args.rows.split(","):
        dataset, need, *_, published, pub_std, source = ROWS[row]
        cmd = command(row, args.root, args.nproc, args.epochs, args.runs)
        shown = " ".join(cmd)
        if need and not Path(args.root, need).is_file():
            print(f"{row}: skipped, no {Path(args.root, need)}", flush=True)
            table.append((row, shown, None, published, pub_std, source))
            continue
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "gnndist.cli", *cmd[1:], "--json", "--no-progress"],
                              capture_output=True, text=True, env={**os.environ, "GNNDIST_DATA": cache})
        if proc.returncode != 0:
            print(f"{row}: failed: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
            table.append((row, shown, None, published, pub_std, source))
            continue
        s = json.loads(proc.stdout.strip().splitlines()[-1])
        s.update(row=row, command=shown, seconds=time.perf_counter() - t0, load=os.getloadavg())
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(s) + "\n")
        key = s["metric"].replace("-", "_")
        print(f"{row}: {s['metric']} test {100 * s[f'test_{key}']:.2f} ± {100 * s[f'test_{key}_std']:.2f} over "
              f"{len(s['runs'])} runs ({s['seconds']:.0f} s, load {s['load'][0]:.1f}): {shown}", flush=True)
        table.append((row, shown, s, published, pub_std, source))
    print("\n| row | metric | runs | gnndist test (mean ± std) | published | source | command |")
    print("|---|---|---:|---:|---:|---|---|")
    for row, shown, s, published, pub_std, source in table:
        pub = f"{published:.2f}" + (f" ± {pub_std:.2f}" if pub_std is not None else "")
        if s is None:
            print(f"| {row} | - | - | not run (no data) | {pub} | {source} | `{shown}` |")
            continue
        key = s["metric"].replace("-", "_")
        print(f"| {row} | {s['metric']} | {len(s['runs'])} | {100 * s[f'test_{key}']:.2f} ± "
              f"{100 * s[f'test_{key}_std']:.2f} | {pub} | {source} | `{shown}` |")


if __name__ == "__main__":
    main()
