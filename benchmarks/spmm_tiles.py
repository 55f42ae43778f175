"""Triton SpMM against cuSPARSE (``torch.sparse.mm``), kernel time only, and a sweep of tile variants.

For every graph, dtype and width F, times (``triton.testing.do_bench``: median of many
calls with the L2 flushed between them, so host launch cost is hidden and only device time
counts) the sum SpMM ``out = A x`` with

    cusparse   torch.sparse.mm on a prebuilt CSR tensor of A
    triton     gnndist's kernel with the tiles of ``TILES`` (what dispatch runs)
    <variant>  the same kernel with one tile choice changed (``--sweep``)

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
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernels import load_coauthor_cs, power_law, symmetric_csr  # noqa: E402  (benchmarks/kernels.py)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def variants(base: tuple) -> dict[str, tuple]:
    """One-change variants of a tile set ``(C, (R_L, D_L), (R_M, D_M), (R_S, D_S), warps, stages)``."""
    C, (rl, dl), (rm, dm), (rs, ds), w, st = base
    out = {
        "stages3": (C, (rl, dl), (rm, dm), (rs, ds), w, 3),
        "warps8x2R": (C, (rl * 2, dl), (rm * 2, dm), (rs * 2, ds), 8, st),
        "C256": (256, (rl, dl), (rm, dm), (rs, ds), w, st),
        "C2048": (2048, (rl, dl), (rm, dm), (rs, ds), w, st),
        "short4": (C, (rl, dl), (rm, dm), (rs * 2, 4), w, st),
        "short16": (C, (rl, dl), (rm, dm), (max(1, rs // 2), 16), w, st),
        "med16": (C, (rl, dl), (rm * 2, 16), (rs, ds), w, st),
        "med64": (C, (rl, 64), (max(1, rm // 2), 64), (rs, ds), w, st),
        "medR2": (C, (rl * 2, dl), (rm * 2, dm), (rs, ds), w, st),
    }
    if w > 2:
        out["warps2"] = (C, (rl, dl), (rm, dm), (rs, ds), 2, st)
    return out


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
    from gnndist.kernels.spmm import triton as tk
    from gnndist.kernels.spmm.sparse import sparse_matrix

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/work/shared/data")
    ap.add_argument("--graphs", default="coauthor-cs,power-law-200k")
    ap.add_argument("--widths", default="64,128,256")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--sweep", action="store_true", help="also time one-change tile variants (fp32)")
    ap.add_argument("--sweep-widths", default="64,128,256")
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
        deg = csr.in_degree()
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
                got = tk.spmm_launch(csr, x)
                err = float(((got.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)))
                t_cs = bench(lambda: torch.sparse.mm(matrix, x))
                t_tr = bench(lambda: tk.spmm_launch(csr, x))
                elt = x.element_size()
                nbytes = 4 * (csr.n_rows + 1 + csr.nnz) + elt * width * (csr.nnz + csr.n_rows)
                line = (f"{dname} F={width:<4} cusparse {t_cs * 1e3:8.1f} us  triton {t_tr * 1e3:8.1f} us  "
                        f"ratio {t_cs / t_tr:5.2f}x  {nbytes / t_tr / 1e6:6.0f} GB/s  max rel err {err:.1e}")
                print(line, flush=True)
                summary.append((gname, dname, width, "sum", t_cs, t_tr))
                base = tk.tiles_for(width)
                if args.sweep and dname == "fp32" and str(width) in args.sweep_widths.split(","):
                    best = ("default", t_tr)
                    for vname, tiles in variants(base).items():
                        try:
                            t_v = bench(lambda: tk.spmm_launch(csr, x, tiles=tiles))
                        except Exception as e:  # a variant that does not compile (registers, shapes)
                            print(f"    {vname:10s} failed: {str(e).splitlines()[0][:100]}")
                            continue
                        print(f"    {vname:10s} {t_v * 1e3:8.1f} us  ({t_tr / t_v:4.2f}x of default)  {tiles}",
                              flush=True)
                        if t_v < best[1]:
                            best = (vname, t_v)
                    print(f"    best: {best[0]} {best[1] * 1e3:.1f} us, {t_cs / best[1]:.2f}x cusparse", flush=True)
                if width == 128:
                    w = torch.rand(csr.nnz, device=dev, dtype=dtype)
                    mw = sparse_matrix(csr, w)
                    inv = (1.0 / deg.clamp(min=1).float())[csr.row].to(dtype)
                    mm = sparse_matrix(csr, inv)
                    for form, f_cs, f_tr in (
                        ("weighted", lambda: torch.sparse.mm(mw, x), lambda: tk.spmm_launch(csr, x, w)),
                        ("mean", lambda: torch.sparse.mm(mm, x), lambda: tk.spmm_launch(csr, x, mean=True)),
                        ("A^T w", lambda: torch.sparse.mm(sparse_matrix(csr_t, w[perm]), x),
                         lambda: tk.spmm_launch(csr_t, x, w[perm])),
                    ):
                        a, b = bench(f_cs), bench(f_tr)
                        print(f"    {form:9s} cusparse {a * 1e3:8.1f} us  triton {b * 1e3:8.1f} us  "
                              f"ratio {a / b:5.2f}x", flush=True)
                        summary.append((gname, dname, width, form, a, b))
                    xg = x.clone().requires_grad_()
                    for impl in ("triton", "sparse"):
                        def step(impl=impl):
                            out = spmm(csr, xg, impl=impl)
                            torch.autograd.grad(out, xg, out)
                        print(f"    spmm(impl={impl}) fwd+bwd, one call with host time: {call_ms(step) * 1e3:8.1f} us",
                              flush=True)
    print("\nsummary (ratio = cusparse / triton; > 1: triton faster)")
    for g, d, w, form, a, b in summary:
        print(f"  {g:16s} {d:5s} F={w:<4} {form:9s} {a / b:5.2f}x")


if __name__ == "__main__":
    main()
