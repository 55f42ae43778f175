"""Aggregation (SpMM, sum) throughput per provider on real and synthetic graphs.

For every graph and feature width F, times ``out[i] = sum_{e in row i} x[col e]`` with

    gnndist          gnndist.kernels.spmm, default dispatch (Triton on CUDA, torch.sparse.mm on CPU), or
                     the path GNNDIST_KERNEL forces (read once here, ``settings_from_env``)
    triton           gnndist's Triton kernel, forced (CUDA only)
    torch.sparse.mm  torch.sparse.mm on a prebuilt CSR tensor (cuSPARSE / MKL)
    pyg              torch_geometric.nn.SimpleConv(aggr="add"): MessagePassing's gather-scatter path
    index_add_       gather x[col], index_add_ into the rows (gnndist's reference)

and prints milliseconds, GB/s, GFLOP/s and the ratio to the best peer (the fastest of
torch.sparse.mm, pyg and index_add_; > 1 means faster than it). Bytes are the minimum
traffic of a row-parallel SpMM: the index arrays, one source row per edge, one output
row per destination. FLOPs are ``2 nnz F``. On graphs whose features fit in cache the
source rows are re-read from cache, so "% of copy bandwidth" can pass 100%. The machine's copy bandwidth (a large
``Tensor.copy_``, read + write) is measured once and aggregation is shown as % of it.

Graphs: Coauthor CS and SNAP ca-AstroPh from ``/work/shared/data`` (``--data``),
symmetrised; a synthetic 1M-node power-law graph (Chung-Lu, exponent 2.1, mean degree
16), generated here.

    python benchmarks/kernels.py                      # all graphs, F = 16 ... 512
    python benchmarks/kernels.py --quick              # smaller synthetic graph, F = 16, 64, 256
    python benchmarks/kernels.py --widths 64,128 --graphs coauthor-cs --device cuda
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from gnndist.kernels import CSR, DTYPES, KernelSettings, dispatch, settings_from_env

from gnndist.bench.kernels import (
    PEERS,
    copy_bandwidth,
    load_coauthor_cs,
    load_snap_astroph,
    power_law,
    providers,
    symmetric_csr,
    timed,
)


def bench_graph(name: str, csr: CSR, widths: list[int], device: torch.device, dtype: torch.dtype, reps: int,
                max_gb: float, copy_gbs: float, summary: list[tuple], settings: KernelSettings) -> None:
    csr = csr.to(device)
    csr.row, csr.transpose(), csr.row_order()  # build the caches outside the timings
    deg = csr.in_degree().float()
    print(f"\n## {name}: {csr.n_rows:,} nodes, {csr.nnz:,} directed edges, mean degree {deg.mean():.1f}, "
          f"max {int(deg.max()):,}, {csr.col.dtype}, {dtype}, {device.type}")
    print(f"{'F':>5} {'provider':<16} {'ms':>9} {'GB/s':>8} {'GFLOP/s':>8} {'vs best peer':>13} {'% copy bw':>10}")
    funcs = providers(csr, device, settings)
    elt, idx = torch.finfo(dtype).bits // 8, csr.col.element_size()
    for width in widths:
        x = torch.randn(csr.num_cols, width, device=device, dtype=dtype)
        nbytes = idx * (csr.n_rows + 1 + csr.nnz) + elt * width * (csr.nnz + csr.n_rows)
        flops = 2 * csr.nnz * width
        seconds = {}
        for provider, fn in funcs.items():
            materialises = provider in ("pyg", "index_add_")
            if materialises and csr.nnz * width * elt / 1e9 > max_gb:
                continue  # the [nnz, F] messages would not fit the --max-gb budget
            if provider == "torch.sparse.mm" and device.type == "cpu" and dtype != torch.float32:
                continue
            with torch.no_grad():
                seconds[provider] = timed(lambda fn=fn, x=x: fn(x), device, reps)
        best_peer = min((seconds[p] for p in PEERS if p in seconds), default=float("nan"))
        for provider, sec in seconds.items():
            ratio = best_peer / sec
            gbs = nbytes / sec / 1e9
            print(f"{width:>5} {provider:<16} {sec * 1e3:>9.3f} {gbs:>8.1f} {flops / sec / 1e9:>8.1f} "
                  f"{ratio:>12.2f}x {100 * gbs / copy_gbs:>9.1f}%")
        skipped = [p for p in funcs if p not in seconds]
        if skipped:
            print(f"{width:>5} skipped: {', '.join(skipped)} (messages over --max-gb or no kernel for the dtype)")
        for provider in ("gnndist", "triton"):
            if provider in seconds and "torch.sparse.mm" in seconds:
                summary.append((name, width, provider, seconds["torch.sparse.mm"] / seconds[provider],
                                100 * nbytes / seconds[provider] / 1e9 / copy_gbs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--widths", default="16,32,64,128,256,512", help="comma-separated feature widths")
    parser.add_argument("--graphs", default="coauthor-cs,astro-ph,power-law")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--index-dtype", default="int64", choices=["int32", "int64"])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 5 cpu, 20 cuda)")
    parser.add_argument("--max-gb", type=float, default=None,
                        help="skip providers whose [nnz, F] messages exceed this (default 2 cpu, 40 cuda)")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="nodes of the synthetic power-law graph")
    parser.add_argument("--quick", action="store_true", help="F = 16, 64, 256; 200k-node synthetic graph; 3 reps")
    args = parser.parse_args()
    settings = settings_from_env()

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    index_dtype = torch.int32 if args.index_dtype == "int32" else torch.int64
    widths = [int(w) for w in ("16,64,256" if args.quick and args.widths == parser.get_default("widths")
                               else args.widths).split(",")]
    reps = args.reps or (3 if args.quick else 5 if device.type == "cpu" else 20)
    max_gb = args.max_gb or (2.0 if device.type == "cpu" else 40.0)
    nodes = 200_000 if args.quick and args.nodes == parser.get_default("nodes") else args.nodes
    threads = torch.get_num_threads()
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {threads} threads"

    copy_gbs = copy_bandwidth(device, (1 << 30) if device.type == "cuda" else (1 << 28), reps)
    print(f"# aggregation benchmark on {dev_name}; torch {torch.__version__}; "
          f"copy bandwidth {copy_gbs:.1f} GB/s (read + write)")
    graph_loaders = {
        "coauthor-cs": lambda: load_coauthor_cs(args.data),
        "astro-ph": lambda: load_snap_astroph(args.data),
        "power-law": lambda: power_law(nodes),
    }
    summary: list[tuple] = []
    for name in args.graphs.split(","):
        if name not in graph_loaders:
            raise SystemExit(f"unknown graph {name!r}; choose from {', '.join(graph_loaders)}")
        csr = symmetric_csr(*graph_loaders[name](), index_dtype)
        label = f"power-law-{nodes // 1000}k" if name == "power-law" else name
        bench_graph(label, csr, widths, device, dtype, reps, max_gb, copy_gbs, summary, settings)

    chosen = dispatch.select("spmm", CSR(torch.zeros(1, dtype=torch.long, device=device),
                                         torch.zeros(0, dtype=torch.long, device=device), 1),
                             torch.zeros(1, 1, device=device, dtype=dtype), None, "sum", impl=settings.impl)[0]
    print(f"\n## summary: gnndist dispatches to {chosen!r} here; goal (GPU): >= 1.0x torch.sparse.mm for F >= 64 "
          f"and >= 60% of copy bandwidth")
    for name, width, provider, ratio, pct in summary:
        if width >= 64:
            mark = "" if device.type != "cuda" else "ok" if ratio >= 1.0 and pct >= 60 else "below goal"
            print(f"{name:<16} F={width:<4} {provider:<8} {ratio:5.2f}x torch.sparse.mm  "
                  f"{pct:5.1f}% of copy bw  {mark}")


if __name__ == "__main__":
    main()
