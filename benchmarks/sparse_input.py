"""A first linear map over mostly-zero features: dense GEMM against :class:`gnndist.sparse_rows.SparseRows`, by density.

    python benchmarks/sparse_input.py [--rows 18333] [--features 6805] [--hidden 256] [--densities ...] [--threads 2]

For each density: the median of ``--reps`` forward + backward passes of ``x W^T + b`` (backward: the weight and
bias gradients; the features need none), dense (``nn.Linear`` on ``[n, F]``) and sparse (the same module on
``SparseRows``, :func:`gnndist.kernels.spmm`), and their ratio. Prints one JSON line per density; the
crossover it shows is what :data:`gnndist.sparse_rows.SPARSE_FEATURES` keeps a margin under. Defaults:
Coauthor CS's shape (18,333 x 6,805, 0.875 % nonzero) at hidden 256.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from gnndist.kernels import KernelSettings

from gnndist.bench.common import loadavg
from gnndist.sparse_rows import rows_of


def timed(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=18333)
    ap.add_argument("--features", type=int, default=6805)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--densities", default="0.002,0.00875,0.02,0.05,0.1,0.2,0.3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lin = torch.nn.Linear(args.features, args.hidden)
    for density in (float(d) for d in args.densities.split(",")):
        x = (torch.rand(args.rows, args.features) < density).float() * torch.rand(args.rows, args.features)
        rows = rows_of(x, KernelSettings())

        def step(inp):
            def run():
                lin.zero_grad(set_to_none=True)
                lin(inp).sum().backward()
            return run

        dense, sparse = timed(step(x), args.reps), timed(step(rows), args.reps)
        print(json.dumps({"rows": args.rows, "features": args.features, "hidden": args.hidden, "density": density,
                          "nnz": rows.csr.nnz, "dense_s": round(dense, 4), "sparse_s": round(sparse, 4),
                          "sparse_over_dense": round(sparse / dense, 3), "threads": args.threads,
                          "load": loadavg()}), flush=True)


if __name__ == "__main__":
    main()
