"""Compile every Triton kernel for a GPU target without a GPU, and report registers and spills.

The interpreter (``TRITON_INTERPRET=1``, what the CPU tests run) executes a kernel's Python
body with NumPy; it does not run Triton's compiler, so errors that only the compiler
raises (a non-constexpr global read in a kernel, a type that does not lower, a tile that
spills) pass there and fail on the first GPU. This module lowers each kernel through
Triton's real pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin) for ``sm_90`` (H100/H200)
and, with Triton's bundled ``cuobjdump``, reads each cubin's registers per thread and local
memory (spills) per tile choice.

    python -m gnndist.kernels.compile_check             # every case, one line each
    python -m gnndist.kernels.compile_check --arch 80   # another target (A100)
    python -m gnndist.kernels.compile_check --quick     # SpMM at F = 128 only (what CI runs)

Run with ``TRITON_INTERPRET`` unset (the kernels must be decorated for compilation);
``tests/test_kernels_compile.py`` runs it in a subprocess.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from .dispatch import interpreting


@dataclass
class Case:
    """One kernel specialisation: the jitted function, argument types, constexprs, warps."""

    name: str
    fn: object
    signature: dict[str, str]
    constexprs: dict[str, object] = field(default_factory=dict)
    num_warps: int = 4


def _sig(names: str, types: str) -> dict[str, str]:
    return dict(zip(names.split(), types.split()))


def cases(quick: bool = False) -> list[Case]:
    """The specialisations the kernels run with (default tiles of every width, flags on and off).

    Also the SpMM tile options ``tune_tiles`` may time ("spmm tune ..."; they may spill: the
    timing on the GPU judges them). ``quick``: the SpMM at one width (128) only, every other
    kernel as usual (the CPU test).
    """
    from .dropout.triton import _dropout_kernel
    from .sddmm.triton import _sddmm_add_kernel, _sddmm_dot_kernel
    from .segment_max.triton import _segment_max_kernel
    from .segment_softmax.triton import _softmax_backward_kernel, _softmax_kernel
    from .spmm.triton_kernel import _combine_kernel

    out = []
    for dtype in ("fp32", "bf16"):
        out += _spmm_cases(dtype, quick)
        out.append(Case(f"spmm combine {dtype}", _combine_kernel,
                        _sig("LONG_ROW PART_PTR PART OUT ROWPTR F", f"*i32 *i32 *fp32 *{dtype} *i32 i32"),
                        {"MEAN": True, "WIDE": False, "BLOCK_P": 8, "BLOCK_F": 128}))
        out.append(Case(f"dropout {dtype}", _dropout_kernel,
                        _sig("X KEYS OUT n F threshold scale", f"*{dtype} *i32 *{dtype} i32 i32 i32 fp32"),
                        {"BLOCK_R": 16, "BLOCK_F": 128}))
        row = {"BLOCK_E": 32, "BLOCK_F": 128}
        out.append(Case(f"segment_max {dtype}", _segment_max_kernel.fn,
                        _sig("ROWPTR COL ROW_ORDER X OUT ARG F", f"*i32 *i32 *i32 *{dtype} *{dtype} *i32 i32"), row))
        out.append(Case(f"softmax {dtype}", _softmax_kernel.fn,
                        _sig("ROWPTR ROW_ORDER S OUT F", f"*i32 *i32 *{dtype} *{dtype} i32"), row))
        out.append(Case(f"softmax backward {dtype}", _softmax_backward_kernel.fn,
                        _sig("ROWPTR ROW_ORDER Y G OUT F", f"*i32 *i32 *{dtype} *{dtype} *{dtype} i32"), row))
        edge = {"BLOCK_E": 64, "BLOCK_D": 32}
        out.append(Case(f"sddmm add {dtype}", _sddmm_add_kernel.fn,
                        _sig("ROW COL A B OUT nnz D", f"*i32 *i32 *{dtype} *{dtype} *{dtype} i32 i32"), edge))
        out.append(Case(f"sddmm dot {dtype}", _sddmm_dot_kernel.fn,
                        _sig("ROW COL A B OUT nnz H D", f"*i32 *i32 *{dtype} *{dtype} *{dtype} i32 i32 i32"), edge))
    return out


def _spmm_cases(dtype: str, quick: bool) -> list[Case]:
    """The SpMM kernel at the default tiles of every width with its flags, then the options the tuning may time."""
    from .spmm.triton_kernel import _spmm_kernel
    from .spmm.triton_tiles import TILES, TUNE_FIELDS, tile_options

    out = []
    spmm_args = ("SEG_START SEG_END SEG_DEST COL W X OUT PART F HEAD_DIM N_HEADS "
                 "n_chunk n_medium n_short p_chunk p_medium")
    types = f"*i32 *i32 *i32 *i32 *{dtype} *{dtype} *{dtype} *fp32 i32 i32 i32 i32 i32 i32 i32 i32"
    for block_f, (C, (rl, dl), (rm, dm), (rs, ds), warps, stages) in TILES.items():
        if quick and block_f != 128:
            continue
        for flags in ({}, {"HAS_W": True}, {"MEAN": True}, {"HAS_W": True, "W_PER_HEAD": True},
                      {"GATHER": False}, {"WIDE": True}):
            if dtype == "bf16" and flags and "HAS_W" not in flags:
                continue
            const = {"HAS_W": False, "W_PER_HEAD": False, "GATHER": True, "MEAN": False, "WIDE": False,
                     "BLOCK_F": block_f, "STAGES": stages, "R_L": rl, "D_L": dl, "R_M": rm, "D_M": dm,
                     "R_S": rs, "D_S": ds} | flags
            tag = "edge-values" if flags == {"GATHER": False} else ",".join(flags) or "sum"
            out.append(Case(f"spmm F<={block_f} {dtype} {tag}", _spmm_kernel, _sig(spmm_args, types), const, warps))
    for block_f, base in TILES.items():  # the options tune_tiles may time, one field changed at a time
        if quick and block_f != 128 or dtype == "bf16" and block_f != 128:
            continue
        for fname, values in TUNE_FIELDS:
            for C, (rl, dl), (rm, dm), (rs, ds), warps, stages in tile_options(base, fname, values)[1:]:
                if fname == "C":
                    continue  # the chunk length is not a compile-time constant
                const = {"HAS_W": False, "W_PER_HEAD": False, "GATHER": True, "MEAN": False, "WIDE": False,
                         "BLOCK_F": block_f, "STAGES": stages, "R_L": rl, "D_L": dl, "R_M": rm, "D_M": dm,
                         "R_S": rs, "D_S": ds}
                name = f"spmm tune F<={block_f} {dtype} {fname} R_S{rs} D_S{ds} R_M{rm} D_M{dm} w{warps} s{stages}"
                out.append(Case(name, _spmm_kernel, _sig(spmm_args, types), const, warps))
    return out


def _tool(name: str) -> str | None:
    """A CUDA binary tool bundled with Triton (``cuobjdump``), if present."""
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return path if os.path.exists(path) else None


def compile_case(case: Case, arch: int) -> dict[str, object]:
    """Compile ``case`` for ``sm_<arch>``; registers and local (spill) bytes from ``cuobjdump -res-usage``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(case.signature)
    for k in case.constexprs:
        sig[k] = "constexpr"
    params = [p.name for p in case.fn.params]
    sig = {p: sig[p] for p in params}  # the kernel's own argument order
    src = ASTSource(fn=case.fn, signature=sig, constexprs=dict(case.constexprs))
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": case.num_warps})
    info: dict[str, object] = {"regs": None, "local_bytes": None}
    cuobjdump = _tool("cuobjdump")
    if cuobjdump and "cubin" in kernel.asm:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(kernel.asm["cubin"])
            text = subprocess.run([cuobjdump, "-res-usage", path], capture_output=True, text=True).stdout
            regs, local = re.search(r"REG:(\d+)", text), re.search(r"LOCAL:(\d+)", text)
            info["regs"] = int(regs.group(1)) if regs else None
            info["local_bytes"] = int(local.group(1)) if local else None  # > 0: registers spilled
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (default 90: H100/H200)")
    ap.add_argument("--only", default="", help="substring of the case names to compile")
    ap.add_argument("--quick", action="store_true", help="the SpMM at one width only")
    args = ap.parse_args(argv)
    if interpreting():
        print("unset TRITON_INTERPRET: the kernels must be decorated for compilation", file=sys.stderr)
        return 2
    failed = 0
    for case in cases(args.quick):
        if args.only not in case.name:
            continue
        try:
            info = compile_case(case, args.arch)
        except Exception as e:  # report every failing case, not just the first
            failed += 1
            print(f"FAIL {case.name}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}", flush=True)
            continue
        print(f"ok   {case.name:40s} warps {case.num_warps}  regs {info['regs']}  local bytes {info['local_bytes']}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
