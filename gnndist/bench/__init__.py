"""``gnndist bench``: scaling benchmarks users run to pick P, the layout and the partitioner.

    gnndist bench strong|weak|partition|peer|kernels|model|all [--quick] [--out DIR] [--device cpu|cuda]
    gnndist bench tta [--quick] [--datasets a,b] [--depths 2,4,8,16] [--sides ...] [--seeds 5] [--budget-s 60]
                      [--trials K] [--threads 2] [--peers-venv DIR]
    gnndist bench report RESULTS [--readme benchmarks/README.md]

Each suite writes ``DIR/<suite>.csv`` (one row per measurement, with the machine, torch /
gnndist versions, git commit and the 1-minute load average) and ``DIR/<suite>_*.png``;
``DIR/run.json`` records the command. Timings: ``--warmup`` epochs, then the median over
the rest (>= 5), the device synchronised before every clock reading. ``tta`` (time to accuracy against
mini-batch peers, :mod:`gnndist.bench.tta`) has its own protocol and files. Suites:
:mod:`gnndist.bench.suites`; figures: :mod:`gnndist.bench.plots`; the results page:
:mod:`gnndist.bench.page`. On a cluster, ``--launcher`` runs every training job through
``torchrun``/``srun`` (see ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import time
from pathlib import Path

from gnndist.errors import UserError

SUITE_NAMES = ("strong", "weak", "partition", "peer", "kernels", "model", "tta")
QUICK_ORDER = ("peer", "strong", "weak", "partition", "kernels")


def _ints(text: str | None, flag: str) -> list[int]:
    from gnndist.config import parse_ints

    return parse_ints(text, flag) if text else []


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", choices=(*SUITE_NAMES, "all", "report"),
                   help="strong | weak | partition | peer | kernels | model (the cost model beside measured "
                   "epochs) | tta (time to accuracy against mini-batch peers) | all (peer, strong, weak, partition, "
                   "kernels) | report")
    p.add_argument("results", nargs="?", default=None, help="report only: a results folder, or a folder of them")
    p.add_argument("--quick", action="store_true",
                   help="small graphs and P <= 4: all suites in < 10 minutes on 2 cores")
    p.add_argument("--out", default=None, help="output folder (default: bench-results/<date>-<machine>)")
    p.add_argument("--machine", default=None,
                   help="machine name in the default --out (default: <cores>core-cpu or the GPU)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="device of peer and kernels (default: cpu); strong/weak/partition ranks take a GPU each "
                   "when there are enough")
    p.add_argument("--dataset", default=None, help="graph of strong/partition/peer (a name or a path; default: "
                   "synthetic-20k-d10 with --quick, else ogbn-arxiv / coauthor-cs)")
    p.add_argument("--root", default=None, help="dataset root (default: $GNNDIST_DATA)")
    p.add_argument("--parts", default=None, help="comma list of P (default: 1,2,4 quick; 1,2,4,8,16)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per run, warm-up included (default: 7 quick, 12)")
    p.add_argument("--warmup", type=int, default=2, help="untimed first epochs (default: %(default)s)")
    p.add_argument("--model", default="gcn", help="model of strong/weak/partition (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=None, help="hidden width (default: 64; tta: gnndist's side, 256 "
                   "for SAGE, the deep model's preset width from 4 layers on: GCNII 64)")
    p.add_argument("--layers", type=int, default=2, help="layers (default: %(default)s)")
    p.add_argument("--launcher", default=None,
                   help="run each training job as `LAUNCHER -m gnndist.cli train ...`, with {nproc} (P), {nnodes} and "
                        "{per_node} filled in, e.g. \"srun -N {nnodes} --ntasks-per-node 1 torchrun --nnodes {nnodes} "
                        "--nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint $HEAD:29500\" (see "
                        "docs/benchmarks.md); default: gnndist's own --ranks launcher on this machine")
    p.add_argument("--per-node", type=int, default=None,
                   help="ranks per node under --launcher (default: P on one node)")
    p.add_argument("--work", default=None, help="folder for the partitions (kept; on a cluster: shared storage; "
                   "default: a temporary folder)")
    p.add_argument("--strategies", default=None, help="strong: only these layouts, a comma list of 1d, 1.5d, 2d, auto")
    p.add_argument("--grid", default=None, help="model: comma list of DATASET:MODEL:HIDDEN cases (default: Cora, "
                   "synthetic, Coauthor CS, Amazon Photo, Cornell5; GCN and SAGE; hidden 16-256)")
    p.add_argument("--train-parts", default=None,
                   help="partition: train on the parts at these P (default: 4 quick; 4,8)")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="CSV only")
    t = p.add_argument_group("tta (gnndist.bench.tta)")
    t.add_argument("--datasets", default=None, help="comma list of graphs (default: cora with --quick, else "
                   "amazon-photo, coauthor-cs, flickr-ane, blogcatalog, facebook-page-page, synthetic-1m)")
    t.add_argument("--depths", default=None, help="comma list of layer counts (default: 2 quick; 2,4,8,16)")
    t.add_argument("--sides", default=None, help="comma list of gnndist, pyg-neighbor, pyg-cluster, dgl-neighbor "
                   "(default: all)")
    t.add_argument("--seeds", type=int, default=None, help="seeds of each final config (default: 2 quick; 5)")
    t.add_argument("--budget-s", type=float, default=None, help="training seconds per run (default: 5 quick; 60)")
    t.add_argument("--trials", type=int, default=0, help="random-search trials per side, the same for every side "
                   "(default: %(default)s, the defaults only)")
    t.add_argument("--threads", type=int, default=2, help="torch threads of every side (default: %(default)s)")
    t.add_argument("--eval-every-s", type=float, default=None, help="a mini-batch side's evaluations, this many "
                   "training seconds apart (default: --budget-s / 100): time to T is known to one such interval "
                   "(gnndist's: one epoch)")
    t.add_argument("--deep-model", default="gcn2", help="gnndist's model from 4 layers on (default: %(default)s; "
                   "below: sage, as the peers at every depth)")
    t.add_argument("--peers-venv", default=None, help="the peers' venv, installed on first use (default: "
                   "$GNNDIST_PEERS_VENV, else ~/.cache/gnndist/peers-venv)")
    p.add_argument("--readme", default=None, help="report only: write the tables between the markers of this file")


def main(args: argparse.Namespace) -> int:
    from gnndist.bench.common import Rows, Settings, environment, loadavg, machine_label, read_csv, write_csv
    from gnndist.bench.suites import run_suite

    if args.suite == "report":
        return _report(args)
    epochs = args.epochs or (7 if args.quick else 12)
    if epochs - args.warmup < 5:
        raise UserError(f"--epochs {epochs} leaves {epochs - args.warmup} timed epochs after --warmup {args.warmup}; "
                        "the medians need >= 5")
    if args.plots and importlib.util.find_spec("matplotlib") is None:  # at the start, not after an hour of runs
        raise UserError("the suites' figures need matplotlib: pip install 'gnndist[bench]', or pass --no-plots")
    date = datetime.date.today().isoformat()
    out = Path(args.out or f"bench-results/{date}-{args.machine or machine_label(args.device)}")
    out.mkdir(parents=True, exist_ok=True)
    s = Settings(out=out, quick=args.quick, device=args.device, dataset=args.dataset,
                 parts=_ints(args.parts, "--parts"), epochs=epochs, warmup=args.warmup, model=args.model,
                 hidden=args.hidden or 64, layers=args.layers, root=args.root, launcher=args.launcher, plots=args.plots,
                 per_node=args.per_node, work=Path(args.work) if args.work else None,
                 strategies=args.strategies.split(",") if args.strategies else [],
                 train_parts=_ints(args.train_parts, "--train-parts") if args.train_parts is not None else None,
                 grid=args.grid.split(",") if args.grid else [], tta=_tta(args) if args.suite == "tta" else None)
    suites = QUICK_ORDER if args.suite == "all" else (args.suite,)
    env = environment(args.device)
    run = {"command": "gnndist bench " + " ".join(sys.argv[sys.argv.index("bench") + 1:] if "bench" in sys.argv
                                                   else [args.suite]),
           "started": datetime.datetime.now().isoformat(timespec="seconds"), "load_start": loadavg(),
           "suites": list(suites), **env}
    t0 = time.perf_counter()
    for name in suites:
        print(f"bench: suite {name} -> {out}/{name}.csv", flush=True)
        rows = Rows(name, env)
        run_suite(name, s, rows)
        path = write_csv(out / f"{name}.csv", rows.rows)
        if s.plots:
            from gnndist.bench.plots import draw

            for png in draw(name, read_csv(path), out):  # plotted from the CSV as written
                print(f"bench: wrote {png}", flush=True)
    run.update(finished=datetime.datetime.now().isoformat(timespec="seconds"), load_end=loadavg(),
               wall_s=round(time.perf_counter() - t0, 1))
    existing = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    if existing and args.suite != "all":  # one suite added to a folder: keep the others' record
        run = {**existing, "command": existing["command"] + f"; {run['command']}", "finished": run["finished"],
               "load_end": run["load_end"], "wall_s": existing.get("wall_s", 0) + run["wall_s"],
               "suites": sorted(set(existing.get("suites", [])) | set(suites))}
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    print(f"bench: done in {run['wall_s']:.0f} s; {out}", flush=True)
    return 0


def _tta(args: argparse.Namespace):
    """``gnndist bench tta``'s settings from its flags (those not given: :class:`TTASettings`' or its quick ones)."""
    from gnndist.bench.tta_protocol import TTASettings

    given = {"datasets": args.datasets.split(",") if args.datasets else [args.dataset] if args.dataset else None,
             "depths": _ints(args.depths, "--depths") or None, "sides": args.sides.split(",") if args.sides else None,
             "seeds": args.seeds, "budget_s": args.budget_s, "trials": args.trials, "threads": args.threads,
             "hidden": args.hidden, "deep_model": args.deep_model, "eval_every_s": args.eval_every_s,
             "peers_venv": args.peers_venv}
    given = {k: v for k, v in given.items() if v is not None}
    return TTASettings.quick(**given) if args.quick else TTASettings(**given)


def _report(args: argparse.Namespace) -> int:
    from gnndist.bench.page import render, update_readme

    if not args.results or not Path(args.results).is_dir():
        raise UserError(f"gnndist bench report needs a results folder, got {args.results!r}")
    results = Path(args.results)
    if args.readme:
        readme = Path(args.readme)
        update_readme(readme, render(results, base=readme.resolve().parent))
        print(f"bench: wrote the results of {results} into {readme}")
    else:
        print(render(results))
    return 0


__all__ = ["SUITE_NAMES", "add_arguments", "main"]
