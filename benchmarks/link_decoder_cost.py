"""What exactness costs the link decoder: float64 (``gnndist.tasks.scoring.wide``'s) against a plain float32 call.

    python benchmarks/link_decoder_cost.py [--pairs 200000] [--width 256] [--decoders dot,mlp] [--threads 2]

Per decoder: one forward and backward over ``--pairs`` pairs of ``[--width]`` endpoint rows (the shape a link step's
pairs have after their rows arrive), in float32 as the decoder is and in float64 (``in_float64``, as ``wide`` runs a
decoder with weights; one without floating-point parameters it runs in float32: ``gnndist_runs``); the median of
``--reps`` timed calls after one untimed, and the bytes the call adds to the peak memory of a fresh process holding
its inputs (``VmHWM``; Linux). Prints one JSON line per decoder and precision, with the load average.
The exchange is untouched: rows travel in float32 either way, the cast happens after they arrive.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from gnndist.bench.common import loadavg
from gnndist.nn.models.link import decoder as make_decoder
from gnndist.tasks.scoring import in_float64


def _peak_bytes(decoder: str, precision: str, pairs: int, width: int, threads: int) -> int:
    """The bytes one forward and backward adds to the peak resident memory of a fresh process that holds only the
    inputs: its ``VmHWM`` after the call minus before it (``ru_maxrss`` would start at this process's size)."""
    hwm = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) * 1024"
    code = (f"import torch; from gnndist.nn.models.link import decoder; from gnndist.tasks.scoring import in_float64; "
            f"torch.set_num_threads({threads}); torch.manual_seed(0); "
            f"hu = torch.randn({pairs}, {width}, requires_grad=True); hv = torch.randn({pairs}, {width}, "
            f"requires_grad=True); dec = decoder({decoder!r}, {width}); before = {hwm}; "
            f"(in_float64(dec, hu, hv) if {precision == 'fp64'} else dec(hu, hv)).sum().backward(); "
            f"print({hwm} - before)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--decoders", default="dot,mlp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hu = torch.randn(args.pairs, args.width, requires_grad=True)
    hv = torch.randn(args.pairs, args.width, requires_grad=True)
    for name in args.decoders.split(","):
        dec = make_decoder(name, args.width)
        base = None
        runs = "fp64" if any(p.is_floating_point() for p in dec.parameters()) else "fp32"
        for precision, call in (("fp32", lambda: dec(hu, hv)), ("fp64", lambda: in_float64(dec, hu, hv))):
            def step():
                call().sum().backward()
            step()
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            s = statistics.median(times)
            base = base or s
            print(json.dumps({"decoder": name, "precision": precision, "gnndist_runs": runs, "pairs": args.pairs,
                              "width": args.width,
                              "fwd_bwd_s": round(s, 4), "vs_fp32": round(s / base, 2),
                              "peak_bytes_per_pair": round(_peak_bytes(name, precision, args.pairs, args.width,
                                                                       args.threads) / args.pairs, 1),
                              "threads": args.threads, "load": loadavg()}), flush=True)


if __name__ == "__main__":
    main()
