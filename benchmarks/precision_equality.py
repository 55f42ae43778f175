"""P ranks against one process per ``--precision``: the measured differences beside the derived bound (issue 35).

Each case trains ``--steps`` steps from the same initial weights at P = 1 and at each P of the case, in each
precision, with :func:`gnndist.testing.record_steps` (what ``tests/test_precision.py`` checks on a toy graph), and
prints the relative differences (max norm) of :func:`gnndist.testing.p_differences`. One step from the same
weights, what :func:`gnndist.training.precision.p_bound` bounds (``docs/strategies.md``, "Half precision"):

    forward      all nodes' logits at the initial weights (eval mode)     <= bound step
    first loss   the first step's loss (dropout on)                        <= bound step
    grad         the first step's gradients: the largest entry difference
                 over the largest gradient entry                            <= bound grad

and the trajectory, measured, not bounded (Adam's first update is lr x sign(g), so a gradient entry within
rounding of zero moves its weight by +-lr whichever way it rounds):

    losses       every step's loss
    logits       all nodes' logits after the steps

fp32's bound is the same formula at fp32's unit roundoff. The fp16 loss scale is fixed (``--loss-scale``,
default 2^10, no step skipped: at the CLI's 2^16 GIN's first steps on Cora overflow, so no gradient to compare).
A 64-layer GCNII is measured too: its bound (bf16 2.06) says nothing, the measurement does.

    python benchmarks/precision_equality.py                              # Cora, every case, fp32 / bf16 / fp16
    python benchmarks/precision_equality.py --cases gcn-1d,gcn2-64 --precisions bf16
    python benchmarks/precision_equality.py --quick                      # gcn-1d and revgnn-1d in bf16
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# name -> (model, norm, layers, strategy, worlds): every model family on 1d, the block layouts on the GCN
CASES = {
    "gcn-1d": ("gcn", "none", 2, "1d", (2, 3, 4)),
    "sage-1d": ("sage", "none", 2, "1d", (2, 3, 4)),
    "gin-1d": ("gin", "batch", 2, "1d", (2, 3, 4)),
    "gat-1d": ("gat", "none", 2, "1d", (2, 3, 4)),
    "gcn2-1d": ("gcn2", "none", 4, "1d", (2, 3, 4)),
    "resgcn-1d": ("resgcn", "batch", 4, "1d", (2, 3, 4)),
    "revgnn-1d": ("revgnn", "batch", 4, "1d", (2, 3, 4)),
    "gcn-1.5d": ("gcn", "none", 2, "1.5d", (4,)),
    "gcn-2d": ("gcn", "none", 2, "2d", (4,)),
    "gcn2-64": ("gcn2", "none", 64, "1d", (2, 4)),
}


def _cfg(case: str, precision: str, steps: int, loss_scale: float):
    from gnndist.config import DistConfig, TrainConfig

    model, norm, layers, strategy, _ = CASES[case]
    cfg = TrainConfig()
    cfg.model.model, cfg.model.norm, cfg.model.layers = model, norm, layers
    cfg.optim.epochs, cfg.optim.precision, cfg.optim.loss_scale, cfg.run.progress = steps, precision, loss_scale, False
    cfg.model.normalize_features = False  # the stored features, as the README's table was measured
    return cfg, DistConfig(strategy=strategy, replication=2 if strategy == "1.5d" else None)


def _job(grid, partdir: str, cases: list[str], precisions: list[str], steps: int, loss_scale: float) -> dict:
    from gnndist.config import DistConfig
    from gnndist.testing import record_steps

    out = {}
    for case in cases:
        if grid.world_size > 1 and grid.world_size not in CASES[case][4]:
            continue
        for precision in precisions:
            cfg, dist = _cfg(case, precision, steps, loss_scale)
            out[case, precision] = record_steps(grid, partdir, cfg, dist if grid.world_size > 1 else DistConfig())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--root", default=None, help="the dataset's directory (Cora is bundled)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    ap.add_argument("--precisions", default="fp32,bf16,fp16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--loss-scale", type=float, default=2.0**10, help="fp16's (fixed unless a step overflows)")
    ap.add_argument("--quick", action="store_true", help="--cases gcn-1d,revgnn-1d --precisions bf16")
    args = ap.parse_args()
    if args.quick:
        args.cases, args.precisions = "gcn-1d,revgnn-1d", "bf16"
    import torch
    from gnndist.datasets import load
    from gnndist.kernels import DTYPES
    from gnndist.partition import partition

    from gnndist.testing import QUICK_PARTITION, p_differences, run_distributed
    from gnndist.training.precision import p_bound

    cases, precisions = args.cases.split(","), args.precisions.split(",")
    bad = [c for c in cases if c not in CASES] + [p for p in precisions if p not in DTYPES]
    if bad:
        raise SystemExit(f"precision_equality.py: unknown {', '.join(bad)} (cases: {', '.join(CASES)}; "
                         f"precisions: {', '.join(DTYPES)})")
    t0 = time.time()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    data = load(args.dataset, root=args.root)
    worlds = sorted({1} | {w for c in cases for w in CASES[c][4]})
    print(f"{args.dataset}: {int(data.num_nodes):,} nodes; {args.steps} steps from the same weights; "
          f"METIS node-balanced partitions; torch {torch.__version__}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="gnndist-precision-eq-") as tmp:
        for w in worlds:
            d = os.path.join(tmp, f"p{w}")
            partition(data, w, progress=False, **QUICK_PARTITION).save(d, dataset=args.dataset, progress=False)
            results[w] = run_distributed(_job, w, d, cases, precisions, args.steps, args.loss_scale,
                                         timeout=3600.0)
            print(f"  P = {w}: trained ({time.time() - t0:.0f} s)", flush=True)
    print(f"\n{'':18s} {'one step from the same weights':^32s}   {'bound':^19s}   {'trajectory':^19s}")
    print(f"{'case':10s} {'P':>2s} {'dtype':5s} {'forward':>10s} {'1st loss':>10s} {'grad':>10s}   {'step':>9s}"
          f" {'grad':>9s}   {'losses':>9s} {'logits':>9s} {'skipped':>7s} within")
    for case in cases:
        layers, case_worlds = CASES[case][2], CASES[case][4]
        for w in case_worlds:
            for p in precisions:
                key = case, p
                d = p_differences([results[1][0][key]], [r[key] for r in results[w]], int(data.num_nodes))
                b = p_bound(DTYPES[p], layers)
                ok = d["forward"] <= b.step and d["first_loss"] <= b.step and d["grad"] <= b.grad
                skipped = f"{results[1][0][key]['skipped']}/{results[w][0][key]['skipped']}"
                print(f"{case:10s} {w:2d} {p:5s} {d['forward']:10.2e} {d['first_loss']:10.2e} {d['grad']:10.2e}"
                      f"   {b.step:9.2e} {b.grad:9.2e}   {d['losses']:9.2e} {d['logits']:9.2e} {skipped:>7s}"
                      f" {'yes' if ok else 'NO'}", flush=True)
    print(f"\nload average at end: {os.getloadavg()}; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
