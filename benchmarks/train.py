"""Training-step time of gnndist on one rank against single-process PyG, same model, same machine.

One step = forward with dropout, loss over the training nodes, backward, Adam step, and
reading the loss (what ``Trainer.train_step`` does). Providers:

    gnndist              ``Trainer.train_step`` on a 1-part partition (``DistGraph`` + 1d strategy,
                         kernels by default dispatch: ``torch.sparse.mm`` on CPU); dropout masks
                         are hashes of (seed, epoch, layer, node id, column), partition-invariant,
                         evaluated only at the nonzeros of sparse input features
    pyg edge_index       ``torch_geometric.nn.GCNConv`` on ``edge_index`` (PyG's default: gcn_norm
                         and gather/scatter message passing every step), ``F.dropout``
    pyg edge_index cached   the same with ``cached=True`` (normalisation computed once)
    pyg sparse_csr       ``GCNConv`` on ``adj_t`` from ``T.ToSparseTensor(layout=torch.sparse_csr)``
                         (torch_sparse is not installed; PyG 2.8 takes torch.sparse tensors), gcn_norm
                         every step
    pyg sparse_csr cached   the same with ``cached=True``: one ``torch.sparse.mm`` per layer

The model is the same everywhere: 2-layer GCN, hidden 16 (``--hidden``), dropout 0.5 before
each layer, Adam lr 0.01 wd 5e-4; features row-normalised on Coauthor CS (as gnndist's
default), left as they are on the synthetic graph (Gaussian, signed). Every provider runs
``--threads`` torch threads (2). Times are the minimum (and median) over ``--reps`` steps after
``--warmup`` steps. Ratios are gnndist / provider: below 1 means gnndist is faster.

    python benchmarks/train.py                       # Coauthor CS + synthetic 1M nodes (avg degree 10, F = 64)
    python benchmarks/train.py --quick               # Coauthor CS + synthetic 100k, fewer reps
    python benchmarks/train.py --graphs cs --profile # + torch.profiler table of one gnndist step
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pyg_reference import PygGCN


def load_graph(name: str, root: str, quick: bool):
    from gnndist.datasets import load, synthetic

    if name == "cs":
        return load("coauthor-cs", root=root), True
    n = 100_000 if quick else 1_000_000
    return synthetic(n, avg_degree=10, num_features=64, seed=0, name=f"synthetic-{n}"), False


# ---------------------------------------------------------------------- gnndist
def gnndist_step(data, hidden: int, normalize: bool, tmp: str) -> tuple[Callable[[int], float], object]:
    from gnndist.partition import load as load_part
    from gnndist.partition import partition

    from gnndist.config import ModelConfig, RunConfig, TrainConfig
    from gnndist.graph import DistGraph
    from gnndist.grid import ProcessGrid
    from gnndist.trainer import Trainer

    partition(data, 1).save(tmp, dataset=getattr(data, "name", "graph"))
    arrays, meta = load_part(tmp, 0)
    g = DistGraph(arrays, meta, ProcessGrid())
    cfg = TrainConfig(model=ModelConfig(hidden=hidden, dropout=0.5, normalize_features=normalize),
                      run=RunConfig(progress=False))
    tr = Trainer(g, cfg)
    return tr.train_step, tr


# ---------------------------------------------------------------------- PyG
def pyg_step(data, hidden: int, normalize: bool, adj_kind: str, cached: bool) -> Callable[[int], float]:
    import torch_geometric.transforms as T

    x = data.x
    if normalize:
        x = x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)
    if adj_kind == "sparse_csr":
        adj = T.ToSparseTensor(layout=torch.sparse_csr)(data.clone()).adj_t  # [N, N] torch.sparse_csr
    else:
        adj = data.edge_index  # [2, E]
    torch.manual_seed(0)
    model = PygGCN(x.shape[1], hidden, data.num_classes, cached=cached)
    optim = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    y, mask = data.y, data.train_mask

    def step(epoch: int) -> float:
        model.train()
        optim.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, adj)[mask], y[mask])
        loss.backward()
        optim.step()
        return float(loss.detach())

    return step


def time_steps(step: Callable[[int], float], warmup: int, reps: int) -> list[float]:
    for e in range(warmup):
        step(e)
    out = []
    for e in range(warmup, warmup + reps):
        t0 = time.perf_counter()
        step(e)
        out.append(time.perf_counter() - t0)
    return out


def profile_step(step: Callable[[int], float], label: str, rows: int = 25) -> None:
    from torch.profiler import ProfilerActivity, profile

    step(100)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for e in range(101, 104):
            step(e)
    print(f"\n--- torch.profiler, 3 steps of {label}, by self CPU time ---")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="cs,synthetic", help="comma list of cs, synthetic")
    ap.add_argument("--root", default="/work/shared/data", help="folder holding coauthor_cs/")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--providers", default="gnndist,pyg edge_index,pyg edge_index cached,pyg sparse_csr,"
                    "pyg sparse_csr cached", help="comma list")
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table of gnndist's step")
    ap.add_argument("--quick", action="store_true", help="synthetic graph of 100k nodes, 2 warmup + 5 reps")
    args = ap.parse_args()
    if args.quick:
        args.warmup, args.reps = 2, 5
    torch.set_num_threads(args.threads)
    providers = args.providers.split(",")
    results: dict[str, dict[str, list[float]]] = {}
    for gname in args.graphs.split(","):
        data, normalize = load_graph(gname, args.root, args.quick)
        label = f"{gname} (N={data.num_nodes:,}, E={data.edge_index.shape[1]:,}, F={data.num_features})"
        print(f"{label}: load {os.getloadavg()[0]:.2f}", flush=True)
        results[label] = {}
        for prov in providers:
            if prov == "gnndist":
                with tempfile.TemporaryDirectory(prefix="gnndist-bench-") as tmp:
                    step, _trainer = gnndist_step(data, args.hidden, normalize, tmp)
                    results[label][prov] = time_steps(step, args.warmup, args.reps)
                    if args.profile:
                        profile_step(step, f"gnndist on {gname}")
                    del step, _trainer
            else:
                kind = "sparse_csr" if "sparse_csr" in prov else "edge_index"
                step = pyg_step(data, args.hidden, normalize, kind, cached=prov.endswith("cached"))
                results[label][prov] = time_steps(step, args.warmup, args.reps)
                if args.profile and prov == "pyg sparse_csr cached":
                    profile_step(step, f"{prov} on {gname}")
                del step
            ts = results[label][prov]
            print(f"  {prov:24s} min {1e3 * min(ts):9.1f} ms  median {1e3 * statistics.median(ts):9.1f} ms"
                  f"  load {os.getloadavg()[0]:.2f}", flush=True)
        del data

    print(f"\ntraining step, 2-layer GCN hidden {args.hidden}, {args.threads} threads, "
          f"min over {args.reps} steps (ms); ratio = gnndist / provider (< 1: gnndist faster)")
    for label, res in results.items():
        print(label)
        g = min(res["gnndist"]) if "gnndist" in res else None
        for prov, ts in res.items():
            ratio = f"{g / min(ts):6.2f}x" if g is not None and prov != "gnndist" else ""
            print(f"  {prov:24s} {1e3 * min(ts):9.1f} {1e3 * statistics.median(ts):9.1f} (median)  {ratio}")
        pyg = {p: min(ts) for p, ts in res.items() if p.startswith("pyg")}
        if g is not None and pyg:
            best = min(pyg, key=pyg.get)
            print(f"  gnndist / PyG best ({best}): {g / pyg[best]:.2f}x (goal <= 1.0)")
            if "pyg edge_index" in pyg:
                print(f"  gnndist / PyG default (pyg edge_index): {g / pyg['pyg edge_index']:.2f}x (goal <= 0.5)")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
