"""Where a layout's SpMM time goes, per phase: its exchanges alone, then the SpMM, forward and backward.

Run on every rank of a job (under ``torchrun``, e.g. on emulated hosts: ``benchmarks/cluster.py --script``), or on
local ranks (``--ranks P``). For each layout it times, at width ``F``, ``--reps`` times after one untimed call:

* ``expand``: the layout's input-row gather alone (blocking: post, wait), no arithmetic;
* ``fold``: its partial-row fold alone (``1d``: none);
* ``fwd``: the layout's SpMM forward (overlapped as in training);
* ``fwd+bwd``: forward and backward;

each the slowest rank's median, with the bytes the busiest rank sends and receives in that phase, and the
rank's wall split (``--detail``: every rank's). Rank 0 prints one JSON line per layout and a table:

    torchrun ... benchmarks/exchange_timeline.py parts/cornell5-p16 --layouts 1d,2d --width 128
    python benchmarks/exchange_timeline.py parts/cora-p4 --ranks 4 --layouts 1d,1.5d:2,2d
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from gnndist.dist.comm import ByteCounter, fold, gather
from gnndist.graph import DistGraph
from gnndist.launcher import launch
from gnndist.strategies import Grid2D, Grid15D, Halo1D


def layout(name: str, overlap: bool):
    if name == "1d":
        return Halo1D(overlap)
    if name == "2d":
        return Grid2D(overlap)
    c = int(name.split(":")[1])
    return Grid15D(c, overlap)


def timed(grid, fn, reps: int) -> tuple[float, float]:
    """(median of this rank's seconds, median of the slowest rank's) over ``reps`` calls after an untimed one."""
    mine = []
    for k in range(reps + 1):
        grid.barrier()
        t0 = time.perf_counter()
        fn()
        grid.synchronize()
        if k:
            mine.append(time.perf_counter() - t0)
    t = torch.tensor(mine, dtype=torch.float64)
    slowest = grid.all_reduce_(t.clone(), op="max")
    return float(t.median()), float(slowest.median())


def body(grid, root: str, names: list[str], width: int, reps: int, overlap: bool,
         order: tuple[str, ...] = ("expand", "fold", "fold-adj", "fwd", "fwd+bwd")) -> list[dict]:
    graph = DistGraph.load(root, grid, strategy=Halo1D())
    out = []
    for name in names:
        s = layout(name, overlap)
        s.build(graph.structure if hasattr(graph, "structure") else graph.part, grid, ByteCounter())
        b = s.block
        x = torch.randn(b.n_owned, width, generator=torch.Generator().manual_seed(grid.rank))
        partial = torch.randn(b.n_fold, width)
        row = {"layout": s.describe(), "width": width}
        phases = {"expand": lambda: gather(x, b.expand, s.counter, "t")}
        if b.fold is not None:
            phases["fold"] = lambda: fold(partial, b.fold, b.n_owned, s.counter, "t")
            phases["fold-adj"] = lambda: gather(x, b.fold, s.counter, "t")  # the fold's adjoint: same axis, reversed
        phases["fwd"] = lambda: s.spmm(x, "t")
        xg = x.clone().requires_grad_(True)
        phases["fwd+bwd"] = lambda: s.spmm(xg, "t").sum().backward()
        for ph in sorted(phases, key=lambda p: order.index(p) if p in order else len(order)):
            fn = phases[ph]
            s.counter.reset()
            mine, slowest = timed(grid, fn, reps)
            sent, recv = s.counter.bytes_sent // (reps + 1), s.counter.bytes_received // (reps + 1)
            every = grid.all_gather_object((mine, sent, recv))
            row[ph] = {"slowest_s": slowest, "rank_s": [e[0] for e in every],
                       "max_sent": max(e[1] for e in every), "max_received": max(e[2] for e in every),
                       "all_sent": sum(e[1] for e in every)}
        row["nnz_max"] = max(grid.all_gather_object(b.nnz))
        row["out_rows_max"] = max(grid.all_gather_object(b.n_owned + b.n_fold))
        out.append(row)
    if grid.is_main:
        for row in out:
            print(json.dumps(row), flush=True)
        print(f"{'layout':12s} {'phase':8s} {'slowest ms':>11s} {'max sent MB':>12s} {'max recv MB':>12s}  load "
              f"{os.getloadavg()[0]:.1f}")
        for row in out:
            for ph in ("expand", "fold", "fold-adj", "fwd", "fwd+bwd"):
                if ph in row:
                    r = row[ph]
                    print(f"{row['layout']:12s} {ph:8s} {r['slowest_s'] * 1e3:11.1f} {r['max_sent'] / 1e6:12.3f} "
                          f"{r['max_received'] / 1e6:12.3f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a partition directory")
    ap.add_argument("--layouts", default="1d,2d", help="comma list of 1d, 2d, 1.5d:C")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-overlap", action="store_true")
    ap.add_argument("--ranks", type=int, default=1, help="local ranks (ignored under torchrun)")
    ap.add_argument("--order", default="expand,fold,fold-adj,fwd,fwd+bwd", help="the order the phases are timed in")
    a = ap.parse_args()
    launch(body, a.root, a.layouts.split(","), a.width, a.reps, not a.no_overlap, tuple(a.order.split(",")),
           ranks=a.ranks, device="cpu")


if __name__ == "__main__":
    main()
