"""The cost model against measured epochs: ``gnndist bench model``'s rows, modelled again by the current model.

    python benchmarks/cost_model.py RESULTS/model.csv --work WORK/model --probe $GNNDIST_DATA/probe.json \
        [--out RESULTS/model_remodelled.csv]

reads the rows a ``gnndist bench model`` run wrote (with ``--work`` kept, and the probe file its runs
used), computes each row's modelled epoch again (``gnndist.bench.suites.remodel``: the current
``gnndist.cost.step_time`` on the layouts the run chose, the constants it used), prints the
calibration table (modelled, measured, ratio per run; the median and worst error; auto against
the fastest fixed layout) and writes the CSV and its plot.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from gnndist.bench.common import read_csv, write_csv
from gnndist.bench.page import model
from gnndist.bench.plots import model_calibration
from gnndist.bench.suites import remodel
from gnndist.cost.times import LAYER_FIXED, STEP_FIXED


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="model.csv of a gnndist bench model run")
    ap.add_argument("--work", required=True, help="its --work folder's model/ (the partitions)")
    ap.add_argument("--probe", required=True, help="the probe file its runs used ($GNNDIST_DATA/probe.json)")
    ap.add_argument("--out", default=None, help="CSV to write (and a PNG beside it); default: print only")
    args = ap.parse_args()
    rows = remodel(read_csv(Path(args.csv)), Path(args.work), Path(args.probe))
    print("\n".join(model(rows)))
    # the fixed cost each run implies (measured epoch less the modelled work), in the probe's tiny steps,
    # against what the model puts there (STEP_FIXED + LAYER_FIXED per layer)
    implied = sorted(
        (r["epoch_s"] - (r["model_epoch_s"] - r["model_other_s"])) * (STEP_FIXED + LAYER_FIXED * r["layers"])
        / r["model_other_s"] for r in rows if r["model_other_s"])
    if implied:
        print(f"\nfixed cost implied by the runs: median {statistics.median(implied):.1f} tiny steps "
              f"(quartiles {implied[len(implied) // 4]:.1f} - {implied[3 * len(implied) // 4]:.1f}); the model's: "
              f"{STEP_FIXED} + {LAYER_FIXED} per layer")
    if args.out:
        out = write_csv(Path(args.out), rows)
        fig = model_calibration(read_csv(out))
        fig.savefig(out.with_suffix(".png"), dpi=90)
        print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
