"""The CLI jobs of ``scripts/gpu_check.sh``'s step 3, as users start them, several at once on one machine.

Equality: ``gnndist run`` at ``--ranks 4`` (ranks sharing the one GPU) against ``--ranks 1`` on every layout
(``1d``, ``1.5d --replication 2``, ``2d``, ``auto``), for GCN on Cora in each ``--precision``, R-GCN on
``synthetic-mag-2k`` and ``--task link`` on Cora. fp32 runs 20 epochs and must end on the same loss (relative
1e-5); a half precision runs one epoch, whose loss (the first step's, from the same weights) must lie within
the derived bound ``p_bound(dtype, layers).step`` (``docs/strategies.md``, "Half precision").

Memory: ``gnndist train`` on a METIS partition of ``synthetic-200k-d20`` (1 and 2 parts) at hidden
16 / 64 / 256, each rank's ``peak_memory_bytes`` (on CUDA ``torch.cuda.max_memory_allocated``), beside the
partition's per-rank counts for ``gnndist.parts.memory.training_peak``.

Every job has its own partition cache and time limit; the JSON record of each (command, seconds, exit status,
the summary's fields, the tail of its stderr) goes to ``OUT`` as one list.

    python scripts/gpu_jobs.py OUT.json [--jobs equal,memory] [--parallel 6] [--timeout 150]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

LIVE: set[subprocess.Popen] = set()  # the jobs running now


def _kill(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def _stopped(signum, frame) -> None:
    """Stopped (``timeout`` sends SIGTERM): take every running job's process group along, leave nothing behind."""
    for p in list(LIVE):
        _kill(p)
    os._exit(124)


STRATEGIES = {"1d": [], "1.5d": ["--replication", "2"], "2d": [], "auto": []}
MEM_GRAPH, MEM_HIDDEN, MEM_PARTS = "synthetic-200k-d20", (16, 64, 256), (1, 2)


def equality_jobs() -> list[dict]:
    jobs = []
    for prec, epochs in (("fp32", 20), ("bf16", 1), ("fp16", 1)):
        base = ["run", "cora", "--epochs", str(epochs), "--precision", prec]
        jobs.append({"name": f"gcn-{prec}-p1", "group": f"gcn-{prec}", "args": base + ["--ranks", "1"]})
        for s, extra in STRATEGIES.items():
            jobs.append({"name": f"gcn-{prec}-p4-{s}", "group": f"gcn-{prec}",
                         "args": base + ["--ranks", "4", "--strategy", s, *extra]})
    for name, base in (("rgcn", ["run", "synthetic-mag-2k", "--model", "rgcn", "--epochs", "20"]),
                       ("link", ["run", "cora", "--task", "link", "--epochs", "20"])):
        jobs.append({"name": f"{name}-p1", "group": name, "args": base + ["--ranks", "1"]})
        jobs.append({"name": f"{name}-p4-1d", "group": name, "args": base + ["--ranks", "4"]})
    return jobs


def memory_jobs(root: str) -> list[dict]:
    return [{"name": f"mem-p{p}-h{h}", "group": "memory", "parts": p, "hidden": h,
             "args": ["train", os.path.join(root, f"mem-p{p}"), "--ranks", str(p), "--hidden", str(h),
                      "--epochs", "3"]}
            for p in MEM_PARTS for h in MEM_HIDDEN]


def run_job(job: dict, timeout: float, scratch: str) -> dict:
    env = dict(os.environ, GNNDIST_PARTITIONS=os.path.join(scratch, "parts-" + job["name"]),
               GNNDIST_DATA=os.path.join(scratch, "data"))
    cmd = [sys.executable, "-m", "gnndist.cli", *job["args"], "--json", "--no-progress"]
    t0 = time.perf_counter()
    # a session of its own: a job over its limit, or all of them when this script is stopped, go with their ranks
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=scratch,
                         start_new_session=True)
    LIVE.add(p)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        _kill(p)
        out, err = p.communicate()
        rc = 124
    finally:
        LIVE.discard(p)
    rec = {k: v for k, v in job.items() if k != "args"}
    rec.update(command="gnndist " + " ".join(job["args"]), seconds=round(time.perf_counter() - t0, 1), rc=rc,
               stderr_tail=err.strip().splitlines()[-6:])
    try:
        s = json.loads(out.strip().splitlines()[-1])
        rec.update({k: s.get(k) for k in ("final_loss", "epoch_time_s", "strategy", "strategies", "precision",
                                          "test_acc", "metric")})
        rec["per_rank"] = [{k: r.get(k) for k in ("rank", "peak_memory_bytes")} for r in s.get("per_rank") or []]
    except (IndexError, ValueError, AttributeError):
        pass
    print(f"  [{rec['seconds']:6.1f} s] rc {rc} {rec['command']}: loss {rec.get('final_loss')}", flush=True)
    return rec


def judge(records: list[dict]) -> list[dict]:
    """One verdict per equality group: every P = 4 run's loss against the P = 1 run's."""
    from gnndist.kernels import DTYPES

    from gnndist.training.precision import p_bound

    out = []
    for group in sorted({r["group"] for r in records if r["group"] != "memory"}):
        rs = [r for r in records if r["group"] == group]
        ref = next((r for r in rs if r["name"].endswith("-p1")), None)
        prec = group.split("-")[1] if group.startswith("gcn-") else "fp32"
        tol = 1e-5 if prec == "fp32" else p_bound(DTYPES[prec], 2).step
        for r in rs:
            if r is ref:
                continue
            a, b = (ref or {}).get("final_loss"), r.get("final_loss")
            diff = abs(a - b) / max(1.0, abs(a)) if a is not None and b is not None else None
            out.append({"case": r["name"], "ref_loss": a, "loss": b, "rel_diff": diff, "tolerance": tol,
                        "ok": diff is not None and diff <= tol and r["rc"] == 0 and ref["rc"] == 0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--jobs", default="equal,memory")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per job")
    ap.add_argument("--only", default=None, help="comma list of job names (a dry run's subset)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _stopped)
    scratch = tempfile.mkdtemp(prefix="gnndist-gpu-jobs-")
    jobs = equality_jobs() if "equal" in args.jobs else []
    only = set(args.only.split(",")) if args.only else None
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(run_job, j, args.timeout, scratch) for j in jobs if not only or j["name"] in only]
        if "memory" in args.jobs:  # meanwhile one partition per P, shared by the hidden sizes (METIS, seed 0)
            for p in MEM_PARTS:
                subprocess.run([sys.executable, "-m", "gnndist.cli", "partition", MEM_GRAPH, "--parts", str(p),
                                "--method", "metis", "--out", os.path.join(scratch, f"mem-p{p}")], check=True,
                               cwd=scratch, capture_output=True,
                               env=dict(os.environ, GNNDIST_DATA=os.path.join(scratch, "data")))
            futures += [pool.submit(run_job, j, args.timeout, scratch) for j in memory_jobs(scratch)
                        if not only or j["name"] in only]
        records = []
        for f in cf.as_completed(futures):  # kept as they come: a run cut short by its limit still reports
            records.append(f.result())
            with open(args.out, "w") as fh:
                json.dump({"partial": True, "verdicts": [], "jobs": records}, fh, indent=1)
    verdicts = judge(records)
    for v in verdicts:
        print(f"  {v['case']:22s} {'ok' if v['ok'] else 'FAIL'}  rel diff {v['rel_diff']}  (<= {v['tolerance']:.2e})")
    with open(args.out, "w") as f:
        json.dump({"seconds": round(time.perf_counter() - t0, 1), "verdicts": verdicts, "jobs": records}, f, indent=1)
    bad = [v["case"] for v in verdicts if not v["ok"]] + [r["name"] for r in records if r["rc"] != 0]
    sys.exit(f"failed: {', '.join(dict.fromkeys(bad))}" if bad else 0)


if __name__ == "__main__":
    main()
