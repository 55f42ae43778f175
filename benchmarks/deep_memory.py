"""Peak training memory of deep models against their depth: RevGNN 4 vs 64 blocks, ResGCN+ 28 layers with and
without ``--recompute``.

Each configuration runs in a fresh process on one rank (``gnndist.init``: the GPU when
there is one, else the CPU). After the part is loaded and the ``Trainer`` (model, Adam) is
built, the process records its resident memory (``base``, VmRSS), resets the high-water mark
(``/proc/self/clear_refs``) and runs ``--epochs`` training steps; ``step`` is VmHWM - base:
what the steps added at their peak (activations, gradients, Adam's state). On CUDA the same
is measured with ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.
Goals (issue 10): RevGNN at 64 blocks <= 1.3x its peak at 4; ResGCN+ at 28 layers with
``--recompute`` >= 3x below its peak without.

Graph: ``gnndist.datasets.synthetic(--nodes, avg_degree=10, num_features=64)``, partitioned
once (P = 1) under ``--cache``. Every model: hidden ``--hidden``, dropout 0.5, batch norm.

    python benchmarks/deep_memory.py                         # 10k nodes, hidden 64, one step
    python benchmarks/deep_memory.py --nodes 20000 --hidden 128  # ResGCN+ without --recompute: ~20 GB

ResGCN+ keeps about ten ``[edges, hidden]`` tensors per layer without recomputation, so
its peak grows as layers x edges x hidden: mind the machine's memory before raising them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from memory import proc_status  # the same RSS reading as benchmarks/memory.py

CONFIGS = [  # (label, model, layers, recompute)
    ("revgnn-4", "revgnn", 4, False),
    ("revgnn-64", "revgnn", 64, False),
    ("resgcn-28", "resgcn", 28, False),
    ("resgcn-28 --recompute", "resgcn", 28, True),
]


def one(partdir: str, model: str, layers: int, recompute: bool, hidden: int, epochs: int) -> dict:
    """One configuration in this process: memory after set-up and the training steps' peak above it."""
    import torch

    from gnndist.config import TrainConfig
    from gnndist.graph import DistGraph
    from gnndist.launcher import init
    from gnndist.training.trainer import Trainer

    grid = init("auto")
    cfg = TrainConfig()
    m = cfg.model
    m.model, m.layers, m.hidden, m.dropout, m.norm, m.recompute = model, layers, hidden, 0.5, "batch", recompute
    cfg.optim.epochs = epochs
    cfg.run.progress = False
    graph = DistGraph.load(partdir, grid)
    trainer = Trainer(graph, cfg)
    cuda = grid.device.type == "cuda"
    base = proc_status()["VmRSS"]
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    if cuda:
        torch.cuda.synchronize()
        base_gpu = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for epoch in range(epochs):
        trainer.train_step(epoch)
    grid.synchronize()
    dt = (time.perf_counter() - t0) / epochs
    out = {"model": model, "layers": layers, "recompute": recompute, "device": str(grid.device),
           "base_rss_mb": base / 2**20, "step_rss_mb": (proc_status()["VmHWM"] - base) / 2**20, "step_s": dt,
           "comm_bytes": graph.context.counter.bytes_sent}
    if cuda:
        out["step_gpu_mb"] = (torch.cuda.max_memory_allocated() - base_gpu) / 2**20
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "gnndist", "bench"))
    ap.add_argument("--one", nargs=4, metavar=("PARTDIR", "MODEL", "LAYERS", "RECOMPUTE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        partdir, model, layers, recompute = args.one
        print(json.dumps(one(partdir, model, int(layers), recompute == "1", args.hidden, args.epochs)))
        return

    from gnndist.datasets import synthetic
    from gnndist.partition import partition

    partdir = Path(args.cache) / f"deep-synthetic-{args.nodes}-p1"
    if not (partdir / "META.json").is_file():
        data = synthetic(args.nodes, avg_degree=10, num_features=64, seed=0)
        partition(data, 1, progress=False).save(partdir, dataset=f"synthetic-{args.nodes}", progress=False)
    rows = {}
    for label, model, layers, recompute in CONFIGS:
        cmd = [sys.executable, __file__, "--one", str(partdir), model, str(layers), str(int(recompute)),
               "--hidden", str(args.hidden), "--epochs", str(args.epochs)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"{label} failed:\n{r.stderr}")
        rows[label] = json.loads(r.stdout.strip().splitlines()[-1])
        row = rows[label]
        gpu = f"  step GPU {row['step_gpu_mb']:8.1f} MB" if "step_gpu_mb" in row else ""
        print(f"{label:24s} base RSS {row['base_rss_mb']:8.1f} MB  step peak RSS +{row['step_rss_mb']:8.1f} MB"
              f"{gpu}  {row['step_s']:.2f} s/step  {row['comm_bytes']:,} B", flush=True)
    for key, name in (("step_rss_mb", "RSS"), ("step_gpu_mb", "GPU")):
        if key not in rows["revgnn-4"]:
            continue
        rev = rows["revgnn-64"][key] / rows["revgnn-4"][key]
        res = rows["resgcn-28"][key] / rows["resgcn-28 --recompute"][key]
        tot = ((rows["revgnn-64"]["base_rss_mb"] + rows["revgnn-64"]["step_rss_mb"])
               / (rows["revgnn-4"]["base_rss_mb"] + rows["revgnn-4"]["step_rss_mb"]))
        print(f"{name}: revgnn 64 / 4 blocks step peak {rev:.2f}x (goal <= 1.3); "
              f"resgcn 28 without / with --recompute {res:.2f}x (goal >= 3)"
              + (f"; whole-process peak revgnn 64 / 4: {tot:.2f}x" if key == "step_rss_mb" else ""))
    print(f"nodes {args.nodes}, hidden {args.hidden}, {args.epochs} step(s); load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
