"""Fit the cost model's structural constants on measured epochs (``gnndist bench model`` rows).

    python benchmarks/cost_fit.py RESULTS/model.csv:WORK/model [CSV:WORK ...] [--probes 'SNAPSHOTS/*.json']
        [--fix PRODUCT_PASS=0.333,ELEMENTWISE_IN=4] [--hold cora:gcn:16,...]

Each row is modelled by ``gnndist.cost.step_time`` itself, on the layouts the run chose (the counts its
partition stored) and the constants it ran with: the row's ``net_*`` columns, or for older rows (no such
columns) the newest probe of its P dated before the row, out of ``--probes`` (copies of the probe file taken
while the grid ran). The structural constants of :mod:`gnndist.cost.times` (:data:`FITTED`) are fitted by robust
least squares on log(modelled / measured); ``--fix`` holds some at given values, ``--hold`` leaves cases out of
the fit and reports them apart. Prints the error of the current constants, the fitted ones and each row's ratio.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
from gnndist.partition import read_meta

from gnndist.bench.common import read_csv
from gnndist.cost import Network, RankLoad, model_widths, times

# the constants fitted, and the bounds of each
FITTED = {"PRODUCT_PASS": (0.05, 3), "ELEMENTWISE_IN": (0.05, 20), "SPARSE_FILL": (0.05, 5),
          "SPARSE_NONZERO": (0.01, 200), "ELEMENTWISE_OUT": (0.5, 40), "STEP_FIXED": (0.1, 60),
          "LAYER_FIXED": (0.1, 20), "FOLD_PASSES": (0.01, 60)}


def _snapshots(pattern: str | None) -> list[tuple[str, int, Network]]:
    """Every distinct probe entry (date, P, constants) in the files matching ``pattern``."""
    seen, out = set(), []
    for path in sorted(glob.glob(pattern)) if pattern else []:
        for key, v in json.loads(Path(path).read_text()).items():
            if "|layouts" in key or (v["date"], key) in seen:
                continue
            seen.add((v["date"], key))
            out.append((v["date"], int(key.rsplit("P=", 1)[1]), Network.from_values("probe", v)))
    return out


def _case(r: dict, work: Path, probes) -> dict | None:
    """What modelling row ``r`` needs: constants, layers (widths, density), per-layer loads; None without constants."""
    if str(r.get("net_alpha", "")) != "":
        net = Network.from_values("probe", r, prefix="net_")
    else:
        older = [p for p in probes if p[1] == int(r["P"]) and p[0] <= str(r["time"])]
        if not older:
            return None
        net = max(older, key=lambda p: p[0])[2]
    d = work / r["dataset"] / f"metis-vol-auto-p{r['P']}"
    meta = read_meta(d)
    x = np.load(d / "part-0" / "x.npy", mmap_mode="r")
    widths = list(model_widths(meta["F"], meta["classes"], int(r["hidden"]), int(r["layers"])))
    if not meta["multilabel"] and widths[-1] == 2:
        widths[-1] = 1  # a binary task: one logit
    loads = [[RankLoad.from_array(a) for a in meta["layouts"][c.split("/")[1] if "/" in c else "1"]]
             for c in str(r["layers_chosen"]).split(",")]
    return {"row": r, "net": net, "widths": tuple(widths), "density": float(np.count_nonzero(x)) / x.size,
            "loads": loads, "measured": float(r["epoch_s"]),
            "name": f"{r['dataset']}:{r['model']}:{r['hidden']}"}


def modelled(case: dict, values: dict[str, float]) -> float:
    """``step_time`` of ``case`` with the structural constants ``values``."""
    saved = {k: getattr(times, k) for k in values}
    try:
        for k, v in values.items():
            setattr(times, k, v)
        # model_layers reads the input passes at call time; the output passes are Layer's default, bound once
        stack = [replace(layer, out_passes=times.ELEMENTWISE_OUT)
                 for layer in times.model_layers(case["row"]["model"], case["widths"], case["density"])]
        return times.step_time(case["loads"], stack, case["net"]).total
    finally:
        for k, v in saved.items():
            setattr(times, k, v)


def summary(cases: list[dict], values: dict[str, float], label: str) -> None:
    errors = [abs(modelled(c, values) / c["measured"] - 1) for c in cases]
    if errors:
        print(f"{label}: {len(errors)} runs, |modelled / measured - 1| median {100 * statistics.median(errors):.1f} %, "
              f"worst {100 * max(errors):.1f} %, {sum(e <= 0.2 for e in errors)} within 20 %")


def main() -> None:
    from scipy.optimize import least_squares

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="CSV:WORK pairs (a bench model CSV and its --work folder's model/)")
    ap.add_argument("--probes", default=None, help="glob of probe-file copies, for rows without net_* columns")
    ap.add_argument("--fix", default="", help="NAME=VALUE,... constants held fixed")
    ap.add_argument("--hold", default="", help="DATASET:MODEL:HIDDEN,... cases left out of the fit")
    args = ap.parse_args()
    probes = _snapshots(args.probes)
    cases = [c for spec in args.runs for r in read_csv(Path(spec.split(":")[0]))
             if (c := _case(r, Path(spec.split(":", 1)[1]), probes)) is not None]
    fixed = {k: float(v) for k, v in (kv.split("=") for kv in args.fix.split(",") if kv)}
    held = set(filter(None, args.hold.split(",")))
    train = [c for c in cases if c["name"] not in held]
    free = [k for k in FITTED if k not in fixed]
    current = {k: getattr(times, k) for k in FITTED}
    summary(cases, current, "current constants")

    def residuals(logs: np.ndarray) -> np.ndarray:
        values = {**fixed, **dict(zip(free, np.exp(logs)))}
        return np.array([np.log(modelled(c, values) / c["measured"]) for c in train])

    start = np.log([min(max(current[k], FITTED[k][0] * 1.01), FITTED[k][1] * 0.99) for k in free])
    bounds = (np.log([FITTED[k][0] for k in free]), np.log([FITTED[k][1] for k in free]))
    fit = least_squares(residuals, start, bounds=bounds, loss="soft_l1", f_scale=0.1)
    values = {**fixed, **dict(zip(free, np.exp(fit.x)))}
    print("fitted: " + ", ".join(f"{k} {v:.3g}" for k, v in values.items()))
    summary(cases, values, "fitted, every run")
    if held:
        summary(train, values, "fitted, the runs fitted")
        summary([c for c in cases if c["name"] in held], values, "fitted, the runs held out")
    for c in cases:
        print(f"  {c['name']:32} P={c['row']['P']} {c['row']['strategy']:4} measured {1e3 * c['measured']:8.1f} ms  "
              f"current {modelled(c, current) / c['measured']:.2f}  fitted {modelled(c, values) / c['measured']:.2f}")


if __name__ == "__main__":
    main()
