"""Training-step time of gnndist on one rank against single-process PyG, same model, same machine.

One step = forward with dropout, loss over the training nodes, backward, Adam step, and
reading the loss (what ``Trainer.train_step`` does). Providers:

    gnndist              ``Trainer.train_step`` on a 1-part partition (``DistGraph`` + 1d strategy,
                         kernels by default dispatch: ``torch.sparse.mm`` on CPU); dropout masks
                         are hashes of (seed, epoch, layer, node id, column), partition-invariant,
                         evaluated only at the nonzeros of sparse input features
    gnndist [K]          the same with kernel path K (``--kernel auto,sparse`` runs both)
    pyg edge_index       ``torch_geometric.nn.GCNConv`` on ``edge_index`` (PyG's default: gcn_norm
                         and gather/scatter message passing every step), ``F.dropout``
    pyg edge_index cached   the same with ``cached=True`` (normalisation computed once)
    pyg sparse_csr       ``GCNConv`` on ``adj_t`` from ``T.ToSparseTensor(layout=torch.sparse_csr)``
                         (torch_sparse is not installed; PyG 2.8 takes torch.sparse tensors), gcn_norm
                         every step
    pyg sparse_csr cached   the same with ``cached=True``: one ``torch.sparse.mm`` per layer

The model is the same everywhere: 2-layer GCN, hidden 16 (``--hidden``), dropout 0.5 before
each layer, Adam lr 0.01 wd 5e-4; features row-normalised on Coauthor CS (as gnndist's
default), left as they are on the synthetic graphs (Gaussian, signed). Every provider runs
``--threads`` torch threads (2). Times are the minimum (and median) over ``--reps`` steps after
``--warmup`` steps. Ratios are gnndist / provider: below 1 means gnndist is faster.

Graphs: ``cs`` (Coauthor CS), ``synthetic`` (``gnndist.datasets.synthetic``, 1M nodes, avg
degree 10, F = 64; 100k with ``--quick``) and ``big`` (2M nodes, avg degree 20, i.e. ~40M
directed entries in ``edge_index``, F = 128: issue 9's graph); ``--nodes`` changes N of both.

    python benchmarks/train.py                       # Coauthor CS + synthetic 1M nodes (avg degree 10, F = 64)
    python benchmarks/train.py --quick               # Coauthor CS + synthetic 100k, fewer reps
    python benchmarks/train.py --graphs cs --profile # + torch.profiler table of one gnndist step

On a GPU (``--device cuda``) every provider runs on the device: gnndist's ``DistGraph`` and
``Trainer`` through ``ProcessGrid(device=cuda)``, PyG's tensors and model through ``.to``.
Each step is timed between two ``torch.cuda.synchronize()``; a provider's peak memory is
``torch.cuda.max_memory_allocated()`` over its warmup and timed steps (its graph, features
and model included); providers are freed (``torch.cuda.empty_cache()``) before the next.
Default providers: gnndist, pyg sparse_csr cached, pyg edge_index cached, pyg edge_index
(~48 GiB on ``big``: drop it with ``--providers`` on a smaller card). Goals (issue 9):
gnndist <= 0.7x PyG's fastest path (cached sparse CSR) in time and in peak memory.
``--profile`` prints tables by self CUDA time for gnndist and pyg sparse_csr cached.

    python benchmarks/train.py --device cuda --graphs cs,big --hidden 128 --profile   # issue 9 (est. 60-90 s)
    python benchmarks/train.py --device cuda --graphs big --hidden 128 --kernel auto,sparse
    python benchmarks/train.py --device cuda --graphs big --hidden 128 --providers "gnndist,pyg sparse_csr cached"
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import torch
from gnndist.kernels import settings_from_env

from gnndist.bench.peer import gnndist_trainer, pyg_step, synchronize, time_steps  # one copy of each step

KERNELS = ("auto", "sparse", "triton", "reference")
PROVIDERS = {
    "cpu": "gnndist,pyg edge_index,pyg edge_index cached,pyg sparse_csr,pyg sparse_csr cached",
    "cuda": "gnndist,pyg sparse_csr cached,pyg edge_index cached,pyg edge_index",
}


def load_graph(name: str, root: str, quick: bool, nodes: int | None):
    from gnndist.datasets import load, synthetic

    if name == "cs":
        return load("coauthor-cs", root=root), True
    if name == "big":
        n = nodes or 2_000_000
        return synthetic(n, avg_degree=20, num_features=128, seed=0, name=f"synthetic-{n}-d20"), False
    n = nodes or (100_000 if quick else 1_000_000)
    return synthetic(n, avg_degree=10, num_features=64, seed=0, name=f"synthetic-{n}"), False


# ---------------------------------------------------------------------- device
def free(device: torch.device) -> None:
    """Drop what the last provider left (cycles included) and hand cached blocks back to the device."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def allocated(device: torch.device) -> int | None:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else None


def gib(b: int | None) -> str:
    return f"{b / 2**30:6.2f} GiB" if b is not None else ""


# ---------------------------------------------------------------------- gnndist
def save_partition(data, out: str) -> None:
    """The 1-part partition of ``data`` (no METIS: every node in part 0) on disk, as ``gnndist partition`` writes it."""
    from gnndist.partition import partition

    partition(data, 1, progress=False).save(out, dataset=getattr(data, "name", "graph"), progress=False)


def gnndist_step(partdir: str, hidden: int, normalize: bool, device: torch.device,
                 map_first: bool = False, kernel: str = "auto",
                 precision: str = "fp32") -> tuple[Callable[[int], float], object]:
    """gnndist's timed step (``gnndist.bench.peer``'s trainer) with the ``kernel`` path, optionally mapping
    before aggregating in layer 0."""
    tr = gnndist_trainer(partdir, hidden, 2, device, normalize, kernel, precision)  # the model on grid.device
    if map_first:  # A/B of gnndist.cost.aggregate_first: the first layer maps, then aggregates (fwd + bwd SpMM)
        tr.model.convs[0].aggregate_first = False
    return tr.train_step, tr


# ---------------------------------------------------------------------- measuring (PyG's step: gnndist.bench.peer)
def measure(step: Callable[[int], float], warmup: int, reps: int,
            device: torch.device) -> tuple[list[float], int | None]:
    """Step times (s) and, on CUDA, the peak bytes allocated from the warmup to the last timed step."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = time_steps(step, warmup, reps, device)
    if device.type != "cuda":
        return times, None
    synchronize(device)
    return times, torch.cuda.max_memory_allocated(device)


def profile_step(step: Callable[[int], float], label: str, device: torch.device, rows: int = 25) -> None:
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    step(100)
    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for e in range(101, 104):
            step(e)
        synchronize(device)
    events = prof.key_averages()
    key, by = "self_cpu_time_total", "self CPU time"
    if cuda:  # torch >= 2.4 names it self_device_time_total; older ones only self_cuda_time_total
        new = len(events) > 0 and hasattr(events[0], "self_device_time_total")
        key, by = ("self_device_time_total" if new else "self_cuda_time_total"), "self CUDA time"
    print(f"\n--- torch.profiler, 3 steps of {label}, by {by} ---")
    print(events.table(sort_by=key, row_limit=rows), flush=True)


def print_choices(graph, label: str) -> None:
    """What measured dispatch chose on each CSR the run multiplied (the strategies' blocks, ``A^T`` for the
    backward) and the times of both paths."""
    from gnndist.kernels import CSR, dispatch

    from gnndist.strategies import BlockStrategy

    found: dict[int, tuple[str, CSR]] = {id(graph.csr): ("A", graph.csr)}
    for s in {graph.strategy, *(graph.strategy.layout_for(t) for t in graph.context.calls)}:
        b = s.block if isinstance(s, BlockStrategy) else None
        for name, m in (("A interior", getattr(b, "csr_int", None)), ("A boundary", getattr(b, "csr_bnd", None)),
                        ("A full", getattr(b, "_full", None)),
                        *(("A split", m) for m in (getattr(b, "_split", None) or ()))):
            if isinstance(m, CSR):
                found.setdefault(id(m), (name, m))
    for name, m in list(found.values()):
        if m._transpose is not None:
            found.setdefault(id(m._transpose[0]), (name + " ^T (backward)", m._transpose[0]))
    for name, m in found.values():
        for key, (choice, times) in dispatch.choices(m).items():
            ms = ", ".join(f"{k} {1e3 * t:.3f} ms" for k, t in times.items())
            print(f"  dispatch {label}, {name} {key[0]} {key[1:]}: {choice} ({ms})")


def run_provider(prov: str, gname: str, data, normalize: bool, partdir: str, args,
                 device: torch.device) -> tuple[list[float], int | None, float]:
    """Build one provider, time it (and profile it with ``--profile``); ``(times, peak bytes, setup s)``.

    Everything the provider put on the device dies with this frame.
    """
    t0 = time.perf_counter()
    if prov.startswith("gnndist"):
        kernel = prov[len("gnndist [") : -1] if prov.endswith("]") else "auto"
        step, _trainer = gnndist_step(partdir, args.hidden, normalize, device, args.map_first, kernel,
                                      args.precision)
        synchronize(device)
        setup = time.perf_counter() - t0
        times, peak = measure(step, args.warmup, args.reps, device)
        if args.profile:
            profile_step(step, f"{prov} on {gname}", device)
        print_choices(_trainer.graph, f"{prov} on {gname}")
        return times, peak, setup
    kind = "sparse_csr" if "sparse_csr" in prov else "edge_index"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    step = pyg_step(data, args.hidden, 2, kind, prov.endswith("cached"), device, normalize=normalize, autocast=half)
    synchronize(device)
    setup = time.perf_counter() - t0
    times, peak = measure(step, args.warmup, args.reps, device)
    if args.profile and prov == "pyg sparse_csr cached":
        profile_step(step, f"{prov} on {gname}", device)
    return times, peak, setup


# ---------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="cs,synthetic", help="comma list of cs, synthetic, big")
    ap.add_argument("--nodes", type=int, default=None, help="N of the synthetic graphs (default 1M / 100k; big: 2M)")
    ap.add_argument("--root", default="/work/shared/data", help="folder holding coauthor_cs/")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (every provider on that device)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--providers", default=None, help="comma list (default: per device, see above)")
    ap.add_argument("--kernel", default=settings_from_env().impl or "auto",
                    help=f"comma list of gnndist kernel paths ({', '.join(KERNELS)}), one gnndist run each "
                         f"(default: $GNNDIST_KERNEL, else auto: gnndist's dispatch)")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler tables of gnndist's step and of pyg sparse_csr cached")
    ap.add_argument("--precision", default="fp32",
                    help="comma list of fp32, bf16, fp16: gnndist's --precision; PyG runs its forward under "
                         "torch.autocast to that dtype; each provider is timed in each")
    ap.add_argument("--quick", action="store_true", help="synthetic graph of 100k nodes, 2 warmup + 5 reps")
    ap.add_argument("--map-first", action="store_true",
                    help="gnndist's first GCN layer maps before it aggregates even when F <= 2 x hidden "
                         "(the rule of gnndist.cost.aggregate_first off: the A/B of that rule)")
    args = ap.parse_args()
    graphs = args.graphs.split(",")
    if unknown := [g for g in graphs if g not in ("cs", "synthetic", "big")]:
        ap.error(f"--graphs: unknown {unknown}; choose from cs, synthetic, big")
    args.graphs = graphs
    if args.device not in ("cpu", "cuda"):
        ap.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    kernels = args.kernel.split(",")
    if unknown := [k for k in kernels if k not in KERNELS]:
        ap.error(f"--kernel: unknown {unknown}; choose from {', '.join(KERNELS)}")
    providers = (args.providers or PROVIDERS[args.device]).split(",")
    known = ("gnndist", "pyg edge_index", "pyg edge_index cached", "pyg sparse_csr", "pyg sparse_csr cached")
    if unknown := [p for p in providers if p not in known]:
        ap.error(f"--providers: unknown {unknown}; choose from {', '.join(known)}")
    gnndist = ["gnndist" if k == "auto" else f"gnndist [{k}]" for k in kernels]
    args.providers = [q for p in providers for q in (gnndist if p == "gnndist" else [p])]
    args.precisions = args.precision.split(",")
    if unknown := [p for p in args.precisions if p not in ("fp32", "bf16", "fp16")]:
        ap.error(f"--precision: unknown {unknown}; choose from fp32, bf16, fp16")
    if args.quick:
        args.warmup, args.reps = 2, 5
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
        print(f"device {torch.cuda.get_device_name(device)}, torch {torch.__version__}", flush=True)
    cuda = device.type == "cuda"
    results: dict[str, dict[str, tuple[list[float], int | None]]] = {}
    failed: list[str] = []
    for gname in args.graphs:
        t0 = time.perf_counter()
        data, normalize = load_graph(gname, args.root, args.quick, args.nodes)
        made = time.perf_counter() - t0
        label = f"{gname} (N={data.num_nodes:,}, E={data.edge_index.shape[1]:,}, F={data.num_features})"
        print(f"{label}: load {os.getloadavg()[0]:.2f}" + (f", built in {made:.1f} s" if cuda else ""), flush=True)
        with tempfile.TemporaryDirectory(prefix="gnndist-bench-") as partdir:
            if any(p.startswith("gnndist") for p in args.providers):
                t0 = time.perf_counter()
                save_partition(data, partdir)
                if cuda:
                    print(f"  1-part partition written in {time.perf_counter() - t0:.1f} s", flush=True)
            for args.precision, prov in itertools.product(args.precisions, args.providers):
                if prov.startswith("pyg sparse_csr") and args.precision != "fp32":
                    # under autocast its fp32 adjacency meets half rows: cuSPARSE (H200, issue 50) and MKL refuse
                    print(f"  {prov:24s} {args.precision} not run: torch.sparse.mm has no fp32-matrix x half-rows "
                          f"product", flush=True)
                    continue
                free(device)
                base = allocated(device)
                try:
                    times, peak, setup = run_provider(prov, gname, data, normalize, partdir, args, device)
                except Exception:  # noqa: BLE001 - report it, measure the other providers, fail at the end
                    traceback.print_exc()
                    print(f"  {prov:24s} {args.precision} FAILED (traceback above)", flush=True)
                    failed.append(f"{gname}: {prov} {args.precision}")
                    continue
                finally:
                    free(device)
                results.setdefault(f"{label}, {args.precision}", {})[prov] = (times, peak)
                mem = f"  peak {gib(peak)} (at start {gib(base).strip()})  setup {setup:5.1f} s" if cuda else ""
                print(f"  {prov:24s} {args.precision} min {1e3 * min(times):9.1f} ms  "
                      f"median {1e3 * statistics.median(times):9.1f} ms"
                      f"{mem}  load {os.getloadavg()[0]:.2f}", flush=True)
        del data
    report(results, args, device)
    if failed:
        sys.exit(f"failed: {'; '.join(failed)}")


def report(results: dict[str, dict[str, tuple[list[float], int | None]]], args, device: torch.device) -> None:
    cuda = device.type == "cuda"
    where = torch.cuda.get_device_name(device) if cuda else f"{args.threads} threads"
    print(f"\ntraining step, 2-layer GCN hidden {args.hidden}, {where}, "
          f"min over {args.reps} steps (ms){', peak memory' if cuda else ''}; "
          f"ratio = gnndist / provider (< 1: gnndist faster)")
    goal = 0.7 if cuda else 1.0
    for label, res in results.items():
        print(label)
        ours = [p for p in res if p.startswith("gnndist")]
        g = min(res[ours[0]][0]) if ours else None
        for prov, (ts, peak) in res.items():
            ratio = f"{g / min(ts):6.2f}x" if g is not None and not prov.startswith("gnndist") else ""
            mem = f"  {gib(peak)}" if cuda else ""
            print(f"  {prov:24s} {1e3 * min(ts):9.1f} {1e3 * statistics.median(ts):9.1f} (median){mem}  {ratio}")
        pyg = {p: min(ts) for p, (ts, _) in res.items() if p.startswith("pyg")}
        if not pyg:
            continue
        best = min(pyg, key=pyg.get)
        for prov in ours:
            t, peak = min(res[prov][0]), res[prov][1]
            line = f"  {prov} / PyG best ({best}): {t / pyg[best]:.2f}x (goal <= {goal})"
            if cuda:
                line += f", peak memory {peak / res[best][1]:.2f}x (goal <= {goal})"
            print(line)
            if "pyg edge_index" in pyg:
                print(f"  {prov} / PyG default (pyg edge_index): {t / pyg['pyg edge_index']:.2f}x (goal <= 0.5)")
    for label, res in results.items():  # half precision against fp32, same graph and provider
        graph, _, prec = label.rpartition(", ")
        for prov, (ts, _) in res.items():
            if prec != "fp32" and prov in results.get(f"{graph}, fp32", {}):
                ratio = min(ts) / min(results[f"{graph}, fp32"][prov][0])
                goal = " (goal <= 0.6)" if prov.startswith("gnndist") else ""
                print(f"{graph}: {prov} {prec} / fp32: {ratio:.2f}x{goal}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
