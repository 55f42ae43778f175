"""Accuracy by each benchmark's own protocol: gnndist's mean ± std beside the published number.

Every row is one ``gnndist run`` command (one partition, one process group, all runs), whose
summary gives each run and the mean ± std of the dataset's standard metric:

    heterophily (Platonov et al., ICLR 2023)   the family's recipe (gnndist.presets.heterophily): --arch residual,
                                               --splits all (the 10 shipped splits), the dataset's metric
    Planetoid (Kipf & Welling, ICLR 2017)      public split, --runs 10 seeds, accuracy (GCNII: its preset, 64 layers)
    Amazon / Coauthor (Shchur et al. 2018)     --splits random --runs 10: 20/30 per class, the rest test, accuracy

A row runs here, through the library, what ``gnndist run`` runs (the flags, the dataset's recipe and
the model's preset composed by :func:`gnndist.presets.from_args`, the cached partition, the ranks of
:func:`gnndist.launch`), building the model from the whole ``--model`` section (``--arch`` included).
Rows whose files are not under ``--root`` are listed as missing (CiteSeer and Tolokers are
held out of ``../shared/data``; PubMed there lacks ``allx``; roman-empire, amazon-ratings
and questions are not there).

    python benchmarks/protocols.py --ranks 2                       # every row, each with its full recipe
    python benchmarks/protocols.py --rows minesweeper-gcn,cora-gcn --ranks 2 --flags "--epochs 100"
    python benchmarks/protocols.py --quick                         # minesweeper + cora, 3 runs, 50 epochs
    python benchmarks/protocols.py --rows cora-gcn --precisions fp32,bf16,fp16   # each row per --precision

With ``--precisions``, every row runs once per ``--precision`` (same partition, same seeds and splits),
and each half-precision row reports its mean's difference from the fp32 row's and whether it is within
:data:`WITHIN` points (issue 35).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
import time
from pathlib import Path

# name -> (dataset, files under --root that must exist, protocol flags, recipe flags, published mean, std, source)
SHCHUR = ["--splits", "random", "--runs", "10"]
WITHIN = 0.5  # points of the metric (x 100) a half-precision mean may differ from fp32's
PLATONOV = "Platonov et al. 2023"
HETERO = {  # dataset -> (file, published test mean ± std of GCN, SAGE, GAT: the paper's repository, notebooks/results)
    "roman-empire": ("roman_empire/roman_empire.npz", (73.69, 0.74), (85.74, 0.67), (80.87, 0.30)),
    "amazon-ratings": ("amazon_ratings/amazon_ratings.npz", (48.70, 0.63), (53.63, 0.39), (49.09, 0.63)),
    "minesweeper": ("minesweeper/minesweeper.npz", (89.75, 0.52), (93.51, 0.57), (92.01, 0.68)),
    "tolokers": ("tolokers/tolokers.npz", (83.64, 0.67), (82.43, 0.44), (83.70, 0.47)),
    "questions": ("questions/questions.npz", (76.09, 1.27), (76.44, 0.62), (77.43, 1.20)),
}
ROWS: dict[str, tuple] = {
    f"{dataset}-{model}": (dataset, file, [], ["--model", model], *published, PLATONOV)
    for dataset, (file, *scores) in HETERO.items() for model, published in zip(("gcn", "sage", "gat"), scores)
}
ROWS.update({
    "cora-gcn": ("cora", None, ["--runs", "10"], ["--model", "gcn"], 81.5, None, "Kipf & Welling 2017"),
    "cora-gcn2": ("cora", None, ["--runs", "10"], ["--model", "gcn2"], 85.5, None,
                  "Chen et al. 2020 (GCNII, 64 layers)"),
    "citeseer-gcn": ("citeseer", "citeseer/ind.citeseer.x", ["--runs", "10"], ["--model", "gcn"], 70.3, None,
                     "Kipf & Welling 2017"),
    "pubmed-gcn": ("pubmed", "pubmed/ind.pubmed.allx", ["--runs", "10"], ["--model", "gcn"], 79.0, None,
                   "Kipf & Welling 2017"),
    "photo-gcn": ("amazon-photo", "amazon_photo/amazon_photo.npz", SHCHUR, ["--model", "gcn"], 91.2, 1.2,
                  "Shchur et al. 2018"),
    "cs-gcn": ("coauthor-cs", "coauthor_cs/coauthor_cs.npz", SHCHUR, ["--model", "gcn"], 91.1, 0.5,
               "Shchur et al. 2018"),
})


def command(row: str, root: str, ranks: int, flags: list[str], runs: int | None) -> list[str]:
    dataset, _, protocol, recipe, *_ = ROWS[row]
    protocol = list(protocol)
    if runs is not None and "--runs" in protocol:
        protocol[protocol.index("--runs") + 1] = str(runs)
    root_flag = [] if dataset == "cora" else ["--root", root]  # Cora is bundled
    return ["gnndist", "run", dataset, *root_flag, "--ranks", str(ranks), *protocol, *recipe, *flags]


def rank_main(grid, partdir: str, cfg) -> dict:
    """One rank (under ``gnndist.launch``): load the part, train every run of the plan, the summary as a dict."""
    from gnndist.graph import DistGraph
    from gnndist.training.runs import fit_runs

    graph = DistGraph.from_config(*DistGraph.read(partdir, grid), grid, cfg)
    summary = fit_runs(graph, cfg)  # --model of cfg, as its spec builds it
    return summary.to_dict()


def run_row(cmd: list[str]) -> dict:
    """What ``gnndist run`` does for ``cmd`` (``gnndist run DATASET ...``), its summary as a dict."""
    import dataclasses

    import gnndist
    from gnndist.cli import build_parser, run_data_config
    from gnndist.config import PartitionConfig
    from gnndist.flags import build_section
    from gnndist.parts.cache import ensure_partition
    from gnndist.presets import dataset_recipe, from_args

    args = build_parser().parse_args(cmd[1:])
    cfg = from_args(args, args.dataset)
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, progress=False))
    recipe = dataset_recipe(args.dataset)
    print(f"  {args.dataset}: {recipe[0] if recipe else 'no family recipe'}; {cfg.model}, {cfg.optim}", flush=True)
    part = dataclasses.replace(build_section(PartitionConfig, args), parts=cfg.dist.ranks)
    partdir = ensure_partition(args.dataset, part, run_data_config(args, cfg), cfg.model)
    return gnndist.launch(rank_main, str(partdir), cfg, ranks=cfg.dist.ranks, backend="gloo",
                          timeout=cfg.dist.timeout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma list of rows (default: every row)")
    ap.add_argument("--root", default=os.environ.get("GNNDIST_SHARED_DATA", "/work/shared/data"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--flags", default="", help='gnndist run flags added to every row (e.g. "--epochs 100 '
                    '--hidden 64"): over the recipe, as on the command line')
    ap.add_argument("--runs", type=int, default=None, help="override --runs of the seed/random-split protocols")
    ap.add_argument("--quick", action="store_true", help="minesweeper-gcn and cora-gcn, 3 runs, 50 epochs")
    ap.add_argument("--precisions", default=None, help="comma list of fp32, bf16, fp16: every row once per "
                    "--precision, the half ones against fp32 (default: the flags' own)")
    ap.add_argument("--json", help="append each row's summary (one JSON line) to this file")
    args = ap.parse_args()
    flags = shlex.split(args.flags)
    precisions = args.precisions.split(",") if args.precisions else [None]
    if "--precision" in flags and args.precisions:
        ap.error("--precision in --flags and --precisions: give one")
    if args.quick:
        args.rows, args.runs, flags = "minesweeper-gcn,cora-gcn", 3, [*flags, "--epochs", "50"]
    os.environ.setdefault("GNNDIST_DATA", tempfile.mkdtemp(prefix="gnndist-protocols-"))  # the partition cache
    table = []
    for row in args.rows.split(","):
        dataset, need, *_, published, pub_std, source = ROWS[row]
        for precision in precisions:
            cmd = command(row, args.root, args.ranks, [*flags, *(["--precision", precision] if precision else [])],
                          args.runs)
            shown = " ".join(cmd)
            if need and not Path(args.root, need).is_file():
                print(f"{row}: skipped, no {Path(args.root, need)}", flush=True)
                table.append((row, precision, shown, None, published, pub_std, source))
                continue
            t0, load0 = time.perf_counter(), os.getloadavg()
            s = run_row(cmd)
            s.update(row=row, precision=precision, command=shown, seconds=time.perf_counter() - t0, load_start=load0,
                     load=os.getloadavg())
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(s) + "\n")
            mean, std = test_value(s)
            print(f"{row}: {s['metric']} test {mean:.2f} ± {std:.2f} over {len(s['runs'])} runs ({s['seconds']:.0f} s, "
                  f"load {load0[0]:.1f} -> {s['load'][0]:.1f}): {shown}", flush=True)
            table.append((row, precision, shown, s, published, pub_std, source))
    print_table(table, by_precision=args.precisions is not None)


def test_value(s: dict) -> tuple[float, float]:
    """A summary's test mean and std of its metric, in points (x 100)."""
    key = s["metric"].replace("-", "_")
    return 100 * s[f"test_{key}"], 100 * s[f"test_{key}_std"]


def print_table(table: list[tuple], by_precision: bool) -> None:
    """The markdown table; ``by_precision``: a precision column and each half row's difference from fp32's."""
    fp32 = {row: test_value(s)[0] for row, precision, _, s, *_ in table if s is not None and precision == "fp32"}
    extra = (" precision | vs fp32 |", "---|---:|") if by_precision else ("", "")
    print(f"\n| row |{extra[0]} metric | runs | gnndist test (mean ± std) | published | source | command |")
    print(f"|---|{extra[1]}---|---:|---:|---:|---|---|")
    for row, precision, shown, s, published, pub_std, source in table:
        pub = f"{published:.2f}" + (f" ± {pub_std:.2f}" if pub_std is not None else "")
        if s is None:
            cells = " - | - |" if by_precision else ""
            print(f"| {row} |{cells} - | - | not run (no data) | {pub} | {source} | `{shown}` |")
            continue
        mean, std = test_value(s)
        cells = ""
        if by_precision:
            diff = "-" if precision == "fp32" or row not in fp32 else (
                f"{mean - fp32[row]:+.2f} ({'within' if abs(mean - fp32[row]) <= WITHIN else 'beyond'} {WITHIN})")
            cells = f" {precision} | {diff} |"
        print(f"| {row} |{cells} {s['metric']} | {len(s['runs'])} | {mean:.2f} ± {std:.2f} | {pub} | {source} | "
              f"`{shown}` |")


if __name__ == "__main__":
    main()
