"""RevGNN's per-epoch training loss on P ranks against one process, at 16 and 64 blocks (issue 20).

For every depth (``--layers``) and world size P (``--worlds``), RevGNN trains on Cora with
the settings of ``gnndist run cora --model revgnn --layers L --epochs E --ranks P`` (the
recipe and preset the CLI applies, the partition it caches), here through the Python API:
``P`` gloo CPU ranks spawned by ``gnndist.testing.run_distributed``. Each row gives the
largest relative difference of the per-epoch global loss from one process,
``max_e |loss_P[e] - loss_1[e]| / |loss_1[e]|``, the epoch where it is reached, and how many
epochs from the first stay within ``--goal`` (1e-5).

The first row of each depth, P = 1 ``stored``, compares one process's reversible training
(backward recovers each block's input from its output) with the same model trained with
stored activations (``RevGNN(reversible=False)``, plain autograd): the two are one function,
so this row is the reconstruction's own drift, with no partition involved.
``--model resgcn`` runs the same table for ResGCN+ (stored activations only), the peer with
the same pre-activation residual blocks: how far any deep model of this recipe drifts.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py                  # 16, 64 blocks; P = 2, 3; 20 epochs
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py --dropout 0      # the same without dropout
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py --stored         # every run with stored activations
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py --model resgcn --layers 16
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py --flags "--weight-decay 0 --seed 1"
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/revgnn_drift.py --quick          # 16 blocks, P = 2, 8 epochs

``--logs REF OTHER...`` compares the per-epoch losses of ``gnndist run ... --log-file`` files
instead (one process on 1 or 2 threads, P ranks, any model), each against the first: the
largest relative difference over every epoch and over epochs 0 and 1 (the first update).
The README's deep-model figures (GCNII, ResGCN+, RevGNN; ``--layers 16``, 20 epochs) come from:

    for M in gcn2 resgcn revgnn; do
      for P in 2 3; do gnndist run cora --model $M --layers 16 --epochs 20 --ranks $P --log-file $M-p$P.jsonl; done
      gnndist run cora --model $M --layers 16 --epochs 20 --ranks 1 --log-file $M-1p2t.jsonl               # 2 threads
      taskset -c 0 gnndist run cora --model $M --layers 16 --epochs 20 --ranks 1 --log-file $M-1p1t.jsonl  # 1 thread
      .venv/bin/python benchmarks/revgnn_drift.py --logs $M-1p2t.jsonl $M-1p1t.jsonl $M-p2.jsonl $M-p3.jsonl
    done

(a rank's threads are its share of the cores it may run on, ``gnndist.dist.join.split_threads``:
``taskset -c 0`` gives one process one thread; P ranks on 2 cores have one each.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time


def _config(dataset: str, model: str, layers: int, epochs: int, dropout: float | None, flags: str):
    """The ``TrainConfig`` and partition settings ``gnndist run DATASET --model MODEL ...`` would build."""
    from gnndist.cli import build_parser
    from gnndist.config import DataConfig, PartitionConfig
    from gnndist.flags import build_section
    from gnndist.presets import from_args as train_config_from_args

    argv = ["run", dataset, "--model", model, "--layers", str(layers), "--epochs", str(epochs), "--no-progress"]
    if dropout is not None:
        argv += ["--dropout", str(dropout)]
    args = build_parser().parse_args(argv + flags.split())
    cfg = train_config_from_args(args, dataset)
    return cfg, build_section(PartitionConfig, args), build_section(DataConfig, args)


def _partdir(dataset: str, world: int, cfg, part, dcfg) -> str:
    """The partition ``gnndist run`` caches for ``world`` ranks (made here when it is not there yet)."""
    from gnndist.parts.cache import make_partition, partition_dir

    part = dataclasses.replace(part, parts=world)
    target = partition_dir(dataset, part, dcfg, cfg.model)
    if not (target / "META.json").is_file():
        make_partition(dataset, part, dcfg, None, cfg.model)
    return str(target)


def _losses(grid, partdir: str, cfg_dict: dict, reversible: bool) -> list[float]:
    """One rank's training: the per-epoch global losses."""
    from gnndist.config import TrainConfig
    from gnndist.graph import DistGraph
    from gnndist.nn import RevGNN
    from gnndist.training.trainer import Trainer

    cfg = TrainConfig.from_dict(cfg_dict)
    trainer = Trainer(DistGraph.load(partdir, grid), cfg)
    if isinstance(trainer.model, RevGNN):
        trainer.model.reversible = reversible
    trainer.fit()
    return [row["loss"] for row in trainer.history]


def _compare(ref: list[float], got: list[float], goal: float) -> tuple[float, int, int]:
    """Largest relative difference, its epoch, and the number of leading epochs within ``goal``."""
    diffs = [abs(g - r) / abs(r) for r, g in zip(ref, got)]
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    within = next((e for e, d in enumerate(diffs) if d > goal), len(diffs))
    return diffs[worst], worst, within


def _log_losses(path: str) -> list[float]:
    """The per-epoch losses of a ``--log-file`` (one JSON object per epoch)."""
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if "loss" in row]


def compare_logs(paths: list[str]) -> None:
    """Every log's per-epoch losses against the first's: largest relative difference, overall and in epochs 0-1."""
    ref = _log_losses(paths[0])
    print(f"reference {paths[0]}: {len(ref)} epochs, loss {ref[0]:.6f} ... {ref[-1]:.6f}")
    print(f"{'log':>28}  {'max rel loss diff':>17}  {'at epoch':>8}  {'epochs 0-1':>10}")
    for path in paths[1:]:
        got = _log_losses(path)
        assert len(got) == len(ref), f"{path}: {len(got)} epochs, the reference {len(ref)}"
        rel, epoch, _ = _compare(ref, got, 0.0)
        first, _, _ = _compare(ref[:2], got[:2], 0.0)
        print(f"{path:>28}  {rel:17.2e}  {epoch:>8}  {first:10.2e}")


def main() -> None:
    from gnndist.testing import run_distributed

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", nargs="+", metavar="JSONL",
                    help="compare these --log-file files' per-epoch losses with the first's, and exit")
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--model", default="revgnn", choices=["revgnn", "resgcn", "gcn2"])
    ap.add_argument("--layers", default="16,64", help="comma-separated block counts (default: 16,64)")
    ap.add_argument("--worlds", default="2,3", help="comma-separated world sizes P compared with 1 (default: 2,3)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--dropout", type=float, default=None, help="default: the model preset's")
    ap.add_argument("--stored", action="store_true", help="train with stored activations (reversible=False) at every P")
    ap.add_argument("--flags", default="", help="more 'gnndist run' flags, e.g. '--weight-decay 0 --seed 1'")
    ap.add_argument("--goal", type=float, default=1e-5)
    ap.add_argument("--quick", action="store_true", help="16 blocks, P = 2, 8 epochs")
    args = ap.parse_args()
    if args.logs:
        return compare_logs(args.logs)
    if args.quick:
        args.layers, args.worlds, args.epochs = "16", "2", 8
    rev = args.model == "revgnn" and not args.stored
    path = "reversible" if rev else "stored"

    rows = []
    print(f"{'model':>6} {'blocks':>6} {'P':>2} {'path':>10}  {'vs 1 rank':>10}  {'max rel loss diff':>17}  "
          f"{'at epoch':>8}  {'epochs within goal':>18}  {'s':>6}", flush=True)
    for layers in [int(v) for v in args.layers.split(",")]:
        cfg, part, dcfg = _config(args.dataset, args.model, layers, args.epochs, args.dropout, args.flags)
        t0 = time.perf_counter()
        one = _partdir(args.dataset, 1, cfg, part, dcfg)
        ref = run_distributed(_losses, 1, one, cfg.to_dict(), rev)[0]
        runs = [(1, "stored" if rev else "reversible", one, not rev)] if args.model == "revgnn" else []
        runs += [(p, path, _partdir(args.dataset, p, cfg, part, dcfg), rev) for p in map(int, args.worlds.split(","))]
        dt = time.perf_counter() - t0  # the reference run's time goes with the first row
        for world, label, partdir, reversible in runs:
            t0 = time.perf_counter()
            got = run_distributed(_losses, world, partdir, cfg.to_dict(), reversible, timeout=3600)[0]
            rel, epoch, within = _compare(ref, got, args.goal)
            rows.append((world, rel))
            print(f"{args.model:>6} {layers:>6} {world:>2} {label:>10}  {path:>10}  {rel:17.2e}  {epoch:>8}  "
                  f"{within:>12} of {len(ref):<3}  {time.perf_counter() - t0 + dt:6.1f}", flush=True)
            dt = 0.0
        print(f"{'':>13} losses of 1 rank {path}: {ref[0]:.6f} ... {ref[-1]:.6f}", flush=True)
    worst = max(r for world, r in rows if world > 1)
    print(f"{args.dataset}, {args.epochs} epochs, dropout {cfg.model.dropout}, hidden {cfg.model.hidden}, "
          f"norm {cfg.model.norm}, lr {cfg.optim.lr}, weight decay {cfg.optim.weight_decay}, seed {cfg.run.seed}: "
          f"worst P > 1 difference {worst:.2e} ({'meets' if worst <= args.goal else 'misses'} the goal {args.goal:g})")


if __name__ == "__main__":
    main()
