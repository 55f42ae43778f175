"""``gnndist`` command line: partition, synth, info, train, run, predict, export, simulate, bench.

A user error (bad name, bad path, corrupt file, wrong world size) prints one line to
standard error and exits 2; ``--json`` makes the last line of standard output one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import signal
import sys
import time
from pathlib import Path

from gnndist.config import (
    DataConfig,
    DistConfig,
    ModelConfig,
    PartitionConfig,
    RunConfig,
    SimulateConfig,
    TaskConfig,
)
from gnndist.errors import RanksFailed, RanksStopped, UserError
from gnndist.flags import add_section, add_train_args, build_section
from gnndist.parts.cache import ensure_partition, link_data, make_partition, partition_dir
from gnndist.presets import from_args


def cmd_partition(args: argparse.Namespace) -> int:
    from gnndist.partition import format_report

    part = build_section(PartitionConfig, args)
    model = build_section(ModelConfig, args)  # --hidden, --layers: the model the partition is for
    task = build_section(TaskConfig, args)  # --use-valedges-as-input: the second message graph it stores
    out, report = make_partition(args.dataset, part, build_section(DataConfig, args), args.out, model, task=task)
    if _json(args):
        print(json.dumps({**report, "dir": str(out)}))
    else:
        print(format_report(report))
        print(f"saved to {out}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from gnndist.partition import format_report, read_meta
    from gnndist.partition.format import verify_partition, version_line, versions_of

    meta = read_meta(args.partdir)
    checked = verify_partition(args.partdir, meta) if args.verify else None  # a bad file: one line, exit 2
    made = versions_of(meta)
    if _json(args):
        print(json.dumps({**meta["report"], "dir": str(args.partdir), "dataset": meta["dataset"],
                          "format_version": made[0], "algorithm_version": made[1], "verified": checked is not None}))
    else:
        print(f"dataset {meta['dataset']}: N={meta['N']:,} E={meta['E']:,} (directed) F={meta['F']} "
              f"classes={meta['classes']}")
        print(version_line(meta))
        print(format_report(meta["report"]))
        print(f"checksums: {checked} part files match META.json" if checked is not None
              else "checksums: not verified (--no-verify)")
    return 0


def _train_config(args: argparse.Namespace, dataset: str | None, task: str | None = None):
    """The training config of the flags, presets (``task``: what the partition holds, for the recipe) and the
    user's kernel overrides (``GNNDIST_KERNEL``, ``GNNDIST_SPMM_TUNE``: read here, once, and passed down as a
    value)."""
    from gnndist.kernels.settings import settings_from_env

    return from_args(args, dataset, kernel_env=settings_from_env(), task=task)  # a bad GNNDIST_KERNEL: one line


def cmd_train(args: argparse.Namespace) -> int:
    from gnndist.train import dataset_of, say_modelled_widths, train

    dataset, task = dataset_of(args.partdir)
    cfg = _train_config(args, dataset, task)
    _say_recipe(dataset, cfg, task)
    say_modelled_widths(args.partdir, cfg)
    return train(str(args.partdir), cfg)


def _say_recipe(dataset: str | None, cfg, task: str | None = None) -> None:
    from gnndist.presets import dataset_recipe, task_of
    from gnndist.train import stage

    recipe = dataset_recipe(dataset, task_of({"task": {"task": cfg.task.task}}, dataset, task), cfg.run.recipe)
    if recipe is not None:
        stage(f"{recipe[0]} (--recipe {cfg.run.recipe}; flags override it)", cfg)


def run_data_config(args: argparse.Namespace, cfg) -> DataConfig:
    """``gnndist run``'s data section: the flags', and under ``--splits random`` one stored random split per run."""
    dcfg = build_section(DataConfig, args)
    if cfg.eval.splits == "random":
        dcfg = dataclasses.replace(dcfg, random_splits=max(dcfg.random_splits, cfg.eval.runs))
    return link_data(dcfg, cfg, args.dataset)


def cmd_run(args: argparse.Namespace) -> int:
    from gnndist.launcher import place
    from gnndist.strategies import strategy_from_config
    from gnndist.train import stage, train

    cfg = _train_config(args, args.dataset)
    _say_recipe(args.dataset, cfg)
    dcfg = run_data_config(args, cfg)
    if dcfg.edge_split is not None and cfg.task.task == "auto":
        cfg = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, task="link"))
    here = place()
    world = here.world if here.launched else cfg.dist.ranks
    part = dataclasses.replace(build_section(PartitionConfig, args), parts=world)  # for the model trained: cfg.model
    # before partitioning: a layout that cannot fit fails in one line, at once
    strategy_from_config(cfg.dist).grid_shape(world)
    if here.launched:  # rank 0 partitions inside the process group; the others wait for it there
        prepare = functools.partial(_prepare_partition, args.dataset, part, dcfg, cfg.model, cfg.run.json, cfg.task)
        return train(str(partition_dir(args.dataset, part, dcfg, cfg.model, cfg.task)), cfg, prepare=prepare)
    return train(str(ensure_partition(args.dataset, part, dcfg, cfg.model, say=lambda msg: stage(msg, cfg),
                                      task=cfg.task)), cfg)


def _prepare_partition(dataset: str, part: PartitionConfig, dcfg: DataConfig, model: ModelConfig,
                       json_out: bool, task: TaskConfig) -> None:
    """Rank 0's share of ``gnndist run`` under torchrun: the cached partition, made if missing."""
    ensure_partition(dataset, part, dcfg, model, say=lambda msg: print(f"gnndist: {msg}", flush=True,
                                                                 file=sys.stderr if json_out else sys.stdout),
                     task=task)


def cmd_simulate(args: argparse.Namespace) -> int:
    from gnndist.parts.cache import check_edge_split, load_data
    from gnndist.parts.simulate import format_table, simulate

    sim = build_section(SimulateConfig, args)  # every flag validated here, one line each
    part = build_section(PartitionConfig, args)
    dcfg = build_section(DataConfig, args)
    check_edge_split(args.dataset, dcfg)
    data = load_data(args.dataset, dcfg)  # --edge-split: the training edges' message graph, a link rank's peak
    t0 = time.perf_counter()
    net = sim.net
    records = simulate(data, sim.part_counts, sim.feature_dim, sim.layers, sim.replications, net, part.method,
                       part.objective, part.partition_seed, part.constraints, precision=sim.precision,
                       device=sim.device)
    if _json(args):
        print(json.dumps(records))
    else:
        name = getattr(data, "name", None) or Path(args.dataset).name
        task = "link ranks (the training edges' message graph)" if records and records[0]["task"] == "link" else "ranks"
        print(f"{name}: N={int(data.num_nodes):,} F={sim.feature_dim} layers={sim.layers} {sim.precision}, "
              f"{task} on {sim.device}, "
              f"network {net.name} (alpha {net.alpha:g} s, beta {net.beta:g} B/s); bytes per epoch, forward + backward")
        print(format_table(records))
        print(f"simulated in {time.perf_counter() - t0:.1f}s")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from gnndist.config import TrainConfig
    from gnndist.inference.predict import PredictRequest, predict_rank
    from gnndist.launcher import launch, place
    from gnndist.partition import read_meta
    from gnndist.training.checkpoint import load_model_file

    d = build_section(DistConfig, args)
    req = PredictRequest(args.checkpoint, args.out, args.what, args.layer, args.force, d.strategy, args.progress,
                         args.type, args.pairs, args.use_valedges_as_input)
    here = place()
    if here.rank == 0:  # one rank alone, rank 0 of torchrun: one line, before any rank starts
        req.check()
    world = here.world if here.launched else d.ranks
    partdir = Path(args.partdir)
    if not (partdir / "META.json").is_file():  # a dataset: its cached partition into one part per rank
        if here.launched:
            raise UserError(f"{partdir} is not a partition directory: under torchrun, predict on one "
                            "(gnndist partition)")
        cfg = TrainConfig.from_dict(load_model_file(args.checkpoint)[1])  # the model it is partitioned for
        task = TaskConfig(use_valedges_as_input=True) if args.use_valedges_as_input else None  # its second graph
        partdir = ensure_partition(args.partdir, PartitionConfig(parts=world),
                                   link_data(build_section(DataConfig, args), cfg, args.partdir), cfg.model,
                                   say=lambda msg: print(f"gnndist: {msg}", file=sys.stderr, flush=True), task=task)
    parts = read_meta(partdir)["parts"]
    if parts != world:
        raise UserError(f"{partdir} has {parts} parts but there are {world} ranks: use --ranks {parts}")
    summary = launch(predict_rank, str(partdir), req, ranks=d.ranks, backend=d.backend, timeout=d.timeout)
    if here.rank == 0:
        if _json(args):
            print(json.dumps(summary), flush=True)
        else:
            n, c = summary["shape"]
            scores = " ".join(f"{k} {v:.4f}" for k, v in summary.items() if k.split("_")[0] in ("train", "val", "test"))
            rows = "pairs" if summary["what"] == "scores" else "nodes"
            print(f"wrote {summary['what']} of {n:,} {rows} x {c} to {summary['out']}"
                  + (f"; {scores}" if scores else ""))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from gnndist.inference.export import export

    done = export(args.checkpoint, args.out, args.format, args.force)
    if _json(args):
        print(json.dumps(done), flush=True)
    else:
        print(f"wrote {done['model']} ({done['parameters']:,} parameters) to {done['out']} as {done['format']}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from gnndist.datasets.sbm import cmd_synth as synth

    return synth(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from gnndist.bench import main as bench_main

    return bench_main(args)


RENAMED = {"--nproc": "--ranks", "--log": "--log-file"}  # old spellings, which torchrun's parser took for its own


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) that point at ``--help``, and no abbreviated flags (one
    spelling of each: an abbreviation that works here is what torchrun's parser takes for its own options)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):
        renamed = [f"{old} is {new}" for old, new in RENAMED.items() if "unrecognized arguments" in message
                   and old in message.split(":", 1)[-1].split()]
        if renamed:
            message += f" ({', '.join(renamed)}: the torchrun-safe spelling)"
        if "unrecognized arguments" in message and "--parts" in message:
            message += ("; --parts is for `gnndist partition`: train and run use one part per rank, "
                        "so the parts are --ranks N (or torchrun's ranks)")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gnndist", description="Distributed full-graph GNN training, exact against one device.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_partition, _add_synth, _add_info, _add_train, _add_run, _add_predict, _add_export, _add_simulate,
                _add_bench):
        add(sub)
    return p


def _add_json(parser: argparse.ArgumentParser, help: str) -> None:
    """``--json`` (:attr:`RunConfig.json`) on a command that is not a training, with what it prints there."""
    add_section(parser, RunConfig, only=("json",), help={"json": help})


def _json(args: argparse.Namespace) -> bool:
    """The value of ``--json`` (:func:`_add_json`)."""
    return build_section(RunConfig, args).json


def _add_partition(sub) -> None:
    sp = sub.add_parser("partition", help="partition a dataset and save the parts")
    sp.add_argument("dataset", help="registered name (cora, ogbn-arxiv, synthetic-100k, ...) or a path")
    add_section(sp, PartitionConfig)
    add_section(sp, ModelConfig, only=("hidden", "layers"))  # the model the partition is for (the cost model's)
    add_section(sp, TaskConfig, only=("use_valedges_as_input",), help={  # the second message graph it stores
        "use_valedges_as_input": "also store the message graph of training + validation edges (a link split's; "
                                 "about the training graph's size again), which gnndist train "
                                 "--use-valedges-as-input scores the test split on (OGB collab's protocol)"})
    add_section(sp, DataConfig)
    sp.add_argument("--out", default=None, help="output directory (default: the cache, $GNNDIST_PARTITIONS/KEY, "
                                                "else DATA_ROOT/partitions/KEY: $GNNDIST_DATA, else ~/.cache/gnndist; "
                                                "never under --root)")
    _add_json(sp, "print the report as one JSON object on the last line")
    sp.set_defaults(func=cmd_partition)


def _add_synth(sub) -> None:
    sy = sub.add_parser("synth", help="generate a synthetic-<N>[-d<deg>] graph into a .npy folder, in chunks")
    sy.add_argument("name", help="synthetic-<N>[k|m|b][-d<avg degree>], e.g. synthetic-8m-d50")
    sy.add_argument("--out", required=True, help="the folder to write (edge_index.npy, x.npy, y.npy, masks)")
    sy.add_argument("--feature-dim", dest="features", type=int, default=64, help="features per node (default 64)")
    sy.add_argument("--seed", type=int, default=0, help="seed of the graph, features and split (default 0)")
    sy.set_defaults(func=cmd_synth)


def _add_info(sub) -> None:
    si = sub.add_parser("info", help="check a saved partition's files and print its report")
    si.add_argument("partdir", help="a partition directory (META.json + part-K/), as written by `gnndist partition`")
    _add_json(si, "print the report as one JSON object (with \"verified\")")
    si.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="check every part file's sha256 against META.json first: a missing or corrupt file "
                         "is an error, exit 2 (default: on; --no-verify reads META.json only)")
    si.set_defaults(func=cmd_info)


def _model_help() -> str:
    """``--model``'s help, read from the registered models' specs."""
    from gnndist.nn.models import models_help

    return models_help()


def _add_train(sub) -> None:
    st = sub.add_parser("train", help="train on a saved partition (one rank per part)")
    st.add_argument("partdir", help="a partition directory with one part per rank (--ranks N, or torchrun's ranks)")
    add_train_args(st, _model_help())
    st.set_defaults(func=cmd_train)


def _add_run(sub) -> None:
    sr = sub.add_parser("run", help="partition (cached) and train: the main job")
    sr.add_argument("dataset", help="registered name (cora, ogbn-arxiv, synthetic-100k, ...) or a path; "
                                    "partitioned into one part per rank for the model trained, cached in "
                                    "$GNNDIST_PARTITIONS, else in partitions/ of the data root ($GNNDIST_DATA, "
                                    "else ~/.cache/gnndist; never under --root)")
    add_section(sr, DataConfig)
    add_section(sr, PartitionConfig, skip=("parts",))  # one part per rank
    add_train_args(sr, _model_help())
    sr.set_defaults(func=cmd_run)


def _add_predict(sub) -> None:
    from gnndist.inference.predict import LAYOUTS, WHATS

    sq = sub.add_parser("predict", help="apply a trained model to every node; write its output in the dataset's order")
    sq.add_argument("partdir", help="a partition directory (one part per rank), or a dataset (partitioned, cached)")
    sq.add_argument("--checkpoint", required=True, help="a --checkpoint DIR of gnndist train (its best.pt), or a "
                                                         "checkpoint file (best.pt, ckpt-*.pt)")
    sq.add_argument("--out", required=True, help="the file to write, by suffix: .npy ([N, C], each rank writes its "
                                                  "rows in place), .pt or .csv (small outputs); row i is dataset "
                                                  "node i")
    sq.add_argument("--what", default="probs", choices=WHATS,
                    help="class probabilities (default), logits, the predicted class, the representation after "
                         "--layer K (0-based; a link model: its encoder's rows without --layer), or a link model's "
                         "scores of --pairs")
    sq.add_argument("--pairs", default=None, help="with --what scores: a .npy of [n, 2] dataset node ids; writes "
                    "the probability of each pair, in their order")
    sq.add_argument("--layer", type=int, default=None, help="with --what embedding: the layer whose output to write")
    sq.add_argument("--force", action="store_true", help="replace an existing --out")
    sq.add_argument("--use-valedges-as-input", action="store_true",
                    help="a link model: run its encoder over training + validation edges (OGB collab's test-time "
                         "input; the partition stores that graph: gnndist partition --use-valedges-as-input)")
    sq.add_argument("--type", default=None, help="a heterogeneous graph: the node type whose rows to write, in its "
                    "dataset order (default: the target type)")
    _add_json(sq, "print the summary (with the metric recomputed from the written rows) as one JSON object")
    sq.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                    help="rank 0 shows each stage (reading, every layer, writing): a bar on a terminal, else one line "
                         "per stage that took 2 s or more (default: on)")
    add_section(sq, DistConfig, only=("ranks", "strategy", "timeout", "backend"),
                help={"strategy": "aggregation layout"}, choices={"strategy": LAYOUTS})
    add_section(sq, DataConfig)
    sq.set_defaults(func=cmd_predict)


def _add_export(sub) -> None:
    from gnndist.inference.export import FORMATS

    se = sub.add_parser("export", help="write a trained model as a plain state dict and config, or for PyG",
                        description="gnndist: {state_dict, config, in_channels, out_channels}; pyg: a state dict "
                                    "that loads into the model's twin in torch_geometric layers (GCN / GraphSAGE / "
                                    "GIN / GAT / GCNII / GINE, or the PyG convs of a PyGAdapter model) built from the "
                                    "file's kwargs (see gnndist/inference/export.py)")
    se.add_argument("--checkpoint", required=True, help="a --checkpoint DIR of gnndist train (its best.pt), or a file")
    se.add_argument("--out", required=True, help="the file to write")
    se.add_argument("--format", default="gnndist", choices=FORMATS, help="gnndist (default) or pyg")
    se.add_argument("--force", action="store_true", help="replace an existing --out")
    _add_json(se, "print what was written as one JSON object")
    se.set_defaults(func=cmd_export)


def _add_simulate(sub) -> None:
    sm = sub.add_parser(
        "simulate", help="communication, memory and modelled time of every layout at many P, no processes",
        description="Partition DATASET into each P of --parts and count, on that partition, the bytes, messages "
                    "and memory of the sparsity-aware layouts (1d; 1.5d for each c of --replication with c | P "
                    "and 1 < c < P; 2d = 1.5d at c = sqrt(P) for a square P) and of CAGNET's sparsity-oblivious "
                    "baselines; the modelled epoch time uses gnndist.cost. Formulas: gnndist/parts/simulate.py "
                    "and memory.py. With an edge split (--edge-split, or an ogbl-* dataset's) the training edges "
                    "are partitioned and the peak is a link rank's. "
                    "--precision bf16|fp16 models rows of 2 bytes (activations, buffers, the wire). "
                    "--json prints the records as one JSON list on the last line. Errors (exit 2): --parts "
                    "not a comma list of integers >= 1 or above the node count, a replication < 2, an "
                    "unknown --network or --precision.")
    sm.add_argument("dataset", help="registered name or a path (as for run)")
    add_section(sm, SimulateConfig)
    add_section(sm, PartitionConfig, skip=("parts",))  # SimulateConfig's --parts: a list
    add_section(sm, DataConfig)
    _add_json(sm, "print the records as one JSON list on the last line")
    sm.set_defaults(func=cmd_simulate)


def _add_bench(sub) -> None:
    import gnndist.bench as bench  # its own flags (a light module: torch is imported when a suite runs)

    sb = sub.add_parser("bench", help="scaling benchmarks (strong, weak, partition, peer, kernels): CSV + PNG",
                        description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(sb)
    sb.set_defaults(func=cmd_bench)


class _Terminated(BaseException):
    """SIGTERM, raised where the process is, so that clean-ups (a half-written partition) run."""


def _terminated(signum, frame):
    raise _Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        previous = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe (`| head`) is caught below, not at exit
        return code
    except RanksStopped as e:
        print(f"gnndist: {e}", file=sys.stderr, flush=True)
        return 128 + e.signum
    except UserError as e:
        print(f"gnndist: error: {e}", file=sys.stderr)
        return e.code if isinstance(e, RanksFailed) else 2
    except KeyboardInterrupt:
        print("gnndist: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away: stop quietly, as head and grep expect
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except _Terminated:
        print("gnndist: stopped by SIGTERM", file=sys.stderr)
        return 143
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    from gnndist.launcher import exit_rank, under_torchrun

    code = main()
    if under_torchrun():  # a rank under torchrun
        exit_rank(code)
    sys.exit(code)
