"""Start the ranks: in this process (one rank or under ``torchrun``) or ``--nproc N`` spawned locally.

Spawned ranks get the same environment ``torchrun`` would give them, so the training
code path is identical either way.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import socket
import sys
import time

import torch

from gnndist.config import TrainConfig
from gnndist.errors import UserError


def under_torchrun() -> bool:
    """True when the launcher (torchrun or a spawned rank) already set the rank environment."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_strategy(cfg: TrainConfig):
    """The run's aggregation strategy from ``--strategy``, ``--replication``, ``--network``, ``--overlap``."""
    from gnndist.cost import network
    from gnndist.strategies import get_strategy

    d = cfg.dist
    kw = {"overlap": d.overlap, "replication": d.replication}
    if d.strategy == "auto":
        kw["network"] = None if d.network == "probe" else network(d.network, d.alpha, d.beta)
        kw["overrides"] = {"alpha": d.alpha, "beta": d.beta}
    return get_strategy(d.strategy, **kw)


def run_rank(partdir: str, cfg: TrainConfig) -> dict:
    """Body of one rank: join the grid, load the part, train; returns the summary."""
    from gnndist.graph import DistGraph
    from gnndist.grid import init
    from gnndist.trainer import Trainer

    if cfg.kernel.kernel != "auto":
        os.environ["GNNDIST_KERNEL"] = cfg.kernel.kernel
    grid = init(cfg.dist.backend, cfg.dist.timeout)
    logging.basicConfig(level=logging.INFO if grid.is_main else logging.WARNING, format="gnndist: %(message)s",
                        stream=sys.stderr)
    try:
        cfg.dist.check_world(grid.world_size)
        error, graph = None, None
        try:
            graph = DistGraph.load(partdir, grid, strategy=make_strategy(cfg))
        except UserError as e:
            error = e
        failed = grid.all_reduce_(torch.tensor([float(error is not None)]))  # fail together, not in a hang
        if error is not None:
            raise error
        if failed.item() > 0:
            raise UserError(f"rank {grid.rank}: another rank could not load its part (see its error)")
        summary = Trainer(graph, cfg).fit()
        grid.barrier()
        return summary
    finally:
        grid.destroy()


def _report(summary: dict, cfg: TrainConfig) -> None:
    if cfg.run.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"{summary['dataset']}: {summary['model']} on {summary['nproc']} rank(s), "
              f"best epoch {summary['best_epoch']}: train {summary['train_acc']:.4f} "
              f"val {summary['val_acc']:.4f} test {summary['test_acc']:.4f} "
              f"({summary['epoch_time_s'] * 1e3:.1f} ms/epoch, {summary['comm_bytes_per_epoch']:,} comm bytes/epoch)",
              flush=True)


def _child(rank: int, world: int, port: int, partdir: str, cfg_dict: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cfg = TrainConfig.from_dict(cfg_dict)
    try:
        summary = run_rank(partdir, cfg)
    except UserError as e:
        print(f"gnndist: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    if rank == 0:
        _report(summary, cfg)
    # leave at once: a normal exit runs C++ static destructors, and gloo's threads can then
    # abort the finished rank (SIGABRT, "terminate called without an active exception")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(partdir: str, cfg: TrainConfig) -> int:
    """Train on ``partdir`` with one rank per part; returns the exit code (0, 2 for user errors)."""
    from gnndist.partition import read_meta

    if under_torchrun() or cfg.dist.nproc == 1:
        summary = run_rank(partdir, cfg)
        if int(os.environ.get("RANK", "0")) == 0:
            _report(summary, cfg)
        return 0
    parts = read_meta(partdir)["parts"]
    cfg.dist.check_world(cfg.dist.nproc)
    if parts != cfg.dist.nproc:
        raise UserError(f"{partdir} has {parts} parts but --nproc is {cfg.dist.nproc}: they must match")
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_child, args=(r, cfg.dist.nproc, port, partdir, cfg.to_dict()), daemon=False)
             for r in range(cfg.dist.nproc)]
    for p in procs:
        p.start()
    # a rank that fails makes its peers wait in a collective: stop them after a grace period
    failed_at = None
    while any(p.is_alive() for p in procs):
        time.sleep(0.2)
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > 10:
            for p in procs:
                if p.is_alive():
                    p.terminate()
    for p in procs:
        p.join()
    codes = [p.exitcode for p in procs]
    if all(c == 0 for c in codes):
        return 0
    return 2 if 2 in codes else 1
