"""``gnndist`` command line: partition, info, train, run.

A user error (bad name, bad path, corrupt file, wrong world size) prints one line to
standard error and exits 2; ``--json`` makes the last line of standard output one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from gnndist.config import (
    DataConfig,
    PartitionConfig,
    add_section,
    add_train_args,
    build_section,
    train_config_from_args,
)
from gnndist.errors import UserError


def partition_dir(dataset: str, part: PartitionConfig, data: DataConfig) -> Path:
    """Cache directory of a partition, keyed by dataset + split + parts + method + objective + seed."""
    from gnndist.datasets import default_root

    name = Path(dataset).name if os.sep in dataset or os.path.exists(dataset) else dataset
    obj = part.objective if part.method == "metis" else "none"
    key = f"{name}-p{part.parts}-{part.method}-{obj}-s{part.seed}"
    if data.split_seed:
        key += f"-split{data.split_seed}"
    if part.method == "metis" and part.constraints != ("nodes", "edges", "train"):
        key += "-b" + "+".join(part.constraints)
    return Path(data.root or default_root()) / "partitions" / key


def make_partition(dataset: str, part: PartitionConfig, dcfg: DataConfig, out: str | None) -> tuple[Path, dict]:
    """Load ``dataset``, partition it and save it; returns the directory and the report."""
    from gnndist.datasets import load
    from gnndist.partition import partition

    data = load(dataset, root=dcfg.root, format=dcfg.format, seed=dcfg.split_seed)
    p = partition(data, part.parts, part.method, part.objective, part.seed, part.constraints)
    target = Path(out) if out else partition_dir(dataset, part, dcfg)
    name = getattr(data, "name", None) or Path(dataset).name
    return p.save(target, dataset=name), p.report


def cmd_partition(args: argparse.Namespace) -> int:
    from gnndist.partition import format_report

    part = build_section(PartitionConfig, args)
    out, report = make_partition(args.dataset, part, build_section(DataConfig, args), args.out)
    if args.json:
        print(json.dumps({**report, "dir": str(out)}))
    else:
        print(format_report(report))
        print(f"saved to {out}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from gnndist.partition import format_report, read_meta

    meta = read_meta(args.partdir)
    if args.json:
        print(json.dumps({**meta["report"], "dir": str(args.partdir), "dataset": meta["dataset"]}))
    else:
        print(f"dataset {meta['dataset']}: N={meta['N']:,} E={meta['E']:,} (directed) F={meta['F']} classes={meta['classes']}")
        print(format_report(meta["report"]))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from gnndist.launch import launch

    cfg = train_config_from_args(args)
    return launch(str(args.partdir), cfg)


def cmd_run(args: argparse.Namespace) -> int:
    from gnndist.launch import launch, under_torchrun
    from gnndist.partition import read_meta

    cfg = train_config_from_args(args)
    dcfg = build_section(DataConfig, args)
    world = int(os.environ["WORLD_SIZE"]) if under_torchrun() else cfg.dist.nproc
    part = build_section(PartitionConfig, args)
    part = dataclasses.replace(part, parts=world)
    target = partition_dir(args.dataset, part, dcfg)

    def ready() -> bool:
        try:
            return (target / "META.json").is_file() and read_meta(target)["parts"] == world
        except UserError:
            return False

    if under_torchrun() and int(os.environ.get("RANK", "0")) != 0:
        deadline = time.monotonic() + cfg.dist.timeout  # rank 0 partitions; the others wait for it
        while not ready():
            if time.monotonic() > deadline:
                raise UserError(f"partition {target} did not appear within {cfg.dist.timeout:g}s (rank 0 failed?)")
            time.sleep(0.5)
    elif not ready():
        make_partition(args.dataset, part, dcfg, str(target))
    return launch(str(target), cfg)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gnndist", description="Distributed full-graph GNN training, exact against one device.")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("partition", help="partition a dataset and save the parts")
    sp.add_argument("dataset", help="registered name (cora, ogbn-arxiv, synthetic-100k, ...) or a path")
    add_section(sp, PartitionConfig)
    add_section(sp, DataConfig)
    sp.add_argument("--out", default=None, help="output directory (default: ROOT/partitions/<key>)")
    sp.add_argument("--json", action="store_true", help="print the report as one JSON object on the last line")
    sp.set_defaults(func=cmd_partition)

    si = sub.add_parser("info", help="print the report of a saved partition")
    si.add_argument("partdir")
    si.add_argument("--json", action="store_true")
    si.set_defaults(func=cmd_info)

    st = sub.add_parser("train", help="train on a saved partition (one rank per part)")
    st.add_argument("partdir")
    add_train_args(st)
    st.set_defaults(func=cmd_train)

    sr = sub.add_parser("run", help="partition (cached) and train: the main job")
    sr.add_argument("dataset")
    add_section(sr, DataConfig)
    add_section(sr, PartitionConfig, skip=("parts",))
    add_train_args(sr)
    sr.set_defaults(func=cmd_run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"gnndist: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gnndist: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
