"""Triton SpMM against cuSPARSE (``torch.sparse.mm``), kernel time only, and a sweep of tile variants.

For every graph, dtype and width F, times (``triton.testing.do_bench``: median of many
calls with the L2 flushed between them, so host launch cost is hidden and only device time
counts) the sum SpMM ``out = A x`` with

    cusparse   torch.sparse.mm on a prebuilt CSR tensor of A
    triton     gnndist's kernel with the fixed tiles of ``TILES`` (what ``impl="triton"`` runs)
    tuned      the same kernel with tiles measured on this graph (``tune_tiles``, what
               dispatch does on CUDA before it times Triton against cuSPARSE); ``--sweep``
               prints every tile set the coordinate descent timed

then the mean and weighted forms and the transposed product of the backward at the
default tiles, and the full call through dispatch with autograd (``spmm(...)``, CUDA
events around one call: what a layer pays, host time included). Ratios are
cusparse / triton: above 1 means the Triton kernel is faster. GB/s count the minimum
traffic (indices once, every source row once per edge it feeds, output once).

    python benchmarks/spmm_tiles.py --data ../shared/data            # coauthor-cs + power-law-200k
    python benchmarks/spmm_tiles.py --sweep --widths 64,256 --dtypes fp32
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from gnndist.kernels import DTYPES as ALL_DTYPES

from gnndist.bench.kernels import load_coauthor_cs, power_law, symmetric_csr

DTYPES = {k: v for k, v in ALL_DTYPES.items() if k != "fp16"}


def bench(fn, reps_ms: int = 60) -> float:
    """Device ms per call (``do_bench``); on CPU (a dry run under TRITON_INTERPRET=1) wall ms of one call."""
    if not torch.cuda.is_available():
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    import triton.testing

    return triton.testing.do_bench(fn, warmup=15, rep=reps_ms)  # ms


def call_ms(fn, reps: int = 20) -> float:
    """Median ms of one call with CUDA events around it (host launch cost included)."""
    if not torch.cuda.is_available():
        return bench(fn)
    from gnndist.kernels.dispatch import device_time

    return device_time(fn, reps, warmup=1) * 1e3


def main() -> None:
    from gnndist.kernels import spmm
    from gnndist.kernels.spmm import triton_tiles
    from gnndist.kernels.spmm.sparse import sparse_matrix
    from gnndist.kernels.spmm.triton import tune_tiles
    from gnndist.kernels.spmm.triton_kernel import spmm_launch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--graphs", default="coauthor-cs,power-law-200k")
    ap.add_argument("--widths", default="64,128,256")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--sweep", action="store_true", help="print every tile set the tuning timed")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: dry run of the script
    summary = []
    for gname in args.graphs.split(","):
        t0 = time.perf_counter()
        if gname == "coauthor-cs":
            src, dst, n = load_coauthor_cs(Path(args.data))
        else:
            src, dst, n = power_law(int(gname.rsplit("-", 1)[1].replace("k", "000")), 16.0)
        csr = symmetric_csr(src, dst, n, torch.int32).to(dev)
        deg = csr.in_degree()  # [n_rows]
        print(f"\n## {gname}: {csr.n_rows:,} rows, {csr.nnz:,} nnz, mean {deg.float().mean():.1f}, "
              f"max {int(deg.max()):,} (built in {time.perf_counter() - t0:.1f} s)", flush=True)
        ones = torch.ones(csr.nnz, device=dev)
        csr_t, perm = csr.transpose()
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            matrix = sparse_matrix(csr, ones.to(dtype))
            for width in [int(w) for w in args.widths.split(",")]:
                x = torch.randn(n, width, device=dev, dtype=dtype)
                ref = torch.sparse.mm(sparse_matrix(csr, ones.double()), x.double())
                got = spmm_launch(csr, x, tiles=triton_tiles.tiles_for(width))
                err = float(((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)))
                t_cs = bench(lambda: torch.sparse.mm(matrix, x))
                t_tr = bench(lambda: spmm_launch(csr, x, tiles=triton_tiles.tiles_for(width)))
                tuned = tune_tiles(csr, x, timer=lambda fn: bench(fn) * 1e-3)  # what dispatch does on CUDA
                t_tu = bench(lambda: spmm_launch(csr, x))
                got = spmm_launch(csr, x)
                err = max(err, float(((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))))
                elt = x.element_size()
                nbytes = 4 * (csr.n_rows + 1 + csr.nnz) + elt * width * (csr.nnz + csr.n_rows)
                line = (f"{dname} F={width:<4} cusparse {t_cs * 1e3:8.1f} us  triton {t_tr * 1e3:8.1f} us "
                        f"({t_cs / t_tr:4.2f}x)  tuned {t_tu * 1e3:8.1f} us ({t_cs / t_tu:4.2f}x, "
                        f"{nbytes / t_tu / 1e6:5.0f} GB/s)  max rel err {err:.1e}")
                print(line, flush=True)
                summary.append((gname, dname, width, "sum", t_cs, t_tr, t_tu))
                if args.sweep:
                    timed = triton_tiles.timings(csr, x, None, False, 0)
                    for tiles, sec in sorted(timed.items(), key=lambda kv: kv[1]):
                        mark = " <- TILES" if tiles == triton_tiles.tiles_for(width) else ""
                        print(f"    {sec * 1e6:10.1f} us  {tiles}{mark}", flush=True)
                    print(f"    tuned: {tuned}", flush=True)
                if width == 128:
                    w = torch.rand(csr.nnz, device=dev, dtype=dtype)
                    mw = sparse_matrix(csr, w)
                    mm = sparse_matrix(csr, csr.mean_scale(torch.float32, per_edge=True).to(dtype))
                    for form, f_cs, f_tr in (
                        ("weighted", lambda: torch.sparse.mm(mw, x), lambda: spmm_launch(csr, x, w)),
                        ("mean", lambda: torch.sparse.mm(mm, x), lambda: spmm_launch(csr, x, mean=True)),
                        ("A^T w", lambda: torch.sparse.mm(sparse_matrix(csr_t, w[perm]), x),
                         lambda: spmm_launch(csr_t, x, w[perm])),
                    ):
                        a, b = bench(f_cs), bench(f_tr)
                        print(f"    {form:9s} cusparse {a * 1e3:8.1f} us  triton {b * 1e3:8.1f} us  "
                              f"ratio {a / b:5.2f}x", flush=True)
                        summary.append((gname, dname, width, form, a, b, None))
                    xg = x.clone().requires_grad_()
                    for impl in ("triton", "sparse"):
                        def step(impl=impl):
                            out = spmm(csr, xg, impl=impl)
                            torch.autograd.grad(out, xg, out)
                        print(f"    spmm(impl={impl}) fwd+bwd, one call with host time: {call_ms(step) * 1e3:8.1f} us",
                              flush=True)
    print("\nsummary (ratio = cusparse / triton; > 1: triton faster; tuned: tiles measured on the graph)")
    for g, d, w, form, a, b, c in summary:
        print(f"  {g:16s} {d:5s} F={w:<4} {form:9s} {a / b:5.2f}x" + (f"  tuned {a / c:5.2f}x" if c else ""))


if __name__ == "__main__":
    main()
