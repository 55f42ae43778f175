"""Link prediction on P ranks against one process, measured: the equality table of issue 61.

    python benchmarks/link_exactness.py [--epochs 20] [--worlds 2,3,4]

Per (model, decoder, edge batch, featureless) case of ``tests/test_link.py`` and per P: the largest relative
difference of the per-epoch losses over ``--epochs`` epochs, and of the first step's gradients (relative to
their largest entry), against one process. The test holds them to a bound; this prints the measured values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parents[1] / "tests" / "test_link.py"


def _cases():
    """``tests/test_link.py`` as the module ``test_link`` (as pytest imports it), for its cases and rank job."""
    sys.path.insert(0, str(TESTS.parent))
    import test_link

    return test_link


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--worlds", default="2,3,4")
    args = ap.parse_args()
    import tempfile

    from gnndist.partition import partition

    from gnndist.testing import QUICK_PARTITION, run_distributed

    m = _cases()
    datasets = {(f, r): m._data(f, r) for f, r in ((False, False), (True, False), (False, True))}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for world in [1, *map(int, args.worlds.split(","))]:
            dirs = {}
            for key, data in datasets.items():
                d = Path(tmp) / f"p{world}-{key[0]}-{key[1]}"
                partition(data, world, **QUICK_PARTITION).save(d, dataset="toy", progress=False)
                dirs[key] = str(d)
            results[world] = run_distributed(m._rank_job, world, dirs, args.epochs)
    print(f"| case | P | losses, {args.epochs} epochs (max rel.) | first-step gradients (max / largest) |")
    print("|---|---:|---:|---:|")
    for case in m.CASES:
        one = results[1][0][case]
        ref = torch.tensor(one["losses"], dtype=torch.float64)
        scale = max(g.abs().max().item() for g in one["grads"].values())
        for world in results:
            if world == 1:
                continue
            loss = grad = 0.0
            for got in results[world]:
                got = got[case]
                loss = max(loss, ((torch.tensor(got["losses"], dtype=torch.float64) - ref).abs() / ref.abs()).max()
                           .item())
                grad = max(grad, max((got["grads"][n] - g).abs().max().item() for n, g in one["grads"].items())
                           / scale)
            print(f"| {'-'.join(map(str, case))} | {world} | {loss:.1e} | {grad:.1e} |", flush=True)


if __name__ == "__main__":
    main()
