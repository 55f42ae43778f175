#!/usr/bin/env bash
# The GPU tier, in one shot on a CUDA machine (~7 minutes on an H200), from a bare copy of the repo.
# Steps, each time-boxed (seconds in brackets), in this order:
#   1+3 [170] at once (correctness, not timed):
#       1. the kernel tests compiled by Triton (incl. the cuda-only large cases)
#       3. scripts/gpu_jobs.py: gnndist run cora --ranks 4 (ranks share the GPU) against --ranks 1 on 1d,
#          1.5d c=2, 2d and auto in each --precision, R-GCN on synthetic-mag-2k, --task link; and the memory
#          sweep (gnndist train --json, hidden 16/64/256, 1 and 2 ranks) for simulate's training_peak
#   5. [90]  SpMM through Triton (fixed and tuned tiles) and dispatch against cuSPARSE (benchmarks/spmm_tiles.py)
#   4. [170] the training step against PyG's cached sparse-CSR GCNConv, fp32 and bf16 (PyG under torch.autocast),
#            profiled (benchmarks/train.py)
#   6. [80]  the cost model beside measured epochs (gnndist bench model: probe, then every layout at P 1/2/4)
#   2. [300] the rest of the test suite with the GPU visible (only when named in STEPS)
# Everything lands in $OUT (or ./gpu_check.out), at most 8 files: summary.json (each step's status, seconds,
# versions, the equality verdicts), kernel_tests.txt, jobs.json, spmm.txt, train.txt, model.csv, suite.txt.
#
#   bash scripts/gpu_check.sh                        # steps "13 5 4 6"
#   STEPS="4" bash scripts/gpu_check.sh              # a subset
#   SWEEP=1 bash scripts/gpu_check.sh                # + every tile set the tuning timed (step 5)
#   ALLOW_CPU=1 STEPS="13" bash scripts/gpu_check.sh # dry run of the plumbing on a machine without a GPU
# A rerun of what a fix touched: KTESTS (kernel test files, default tests/test_kernels_*.py), JOBS_ONLY (job
# names of scripts/gpu_jobs.py), SPMM_GRAPHS, MODEL_PARTS, and each step's limit T1 T3 T5 T4 T6 T2 (seconds).
#
# The image needs torch (CUDA build), Triton and PyG. pymetis and ogb may be missing there: put their wheels in
# .whl/ (see benchmarks/README.md, "GPU"); they are installed to /tmp/site first. Coauthor CS is read from
# $GNNDIST_BENCH_DATA (default ../shared/data, else .gpu/data when the data travelled with the repo).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PY=.venv/bin/python
fi
LOG=${OUT:-gpu_check.out}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
STEPS=${STEPS:-"13 5 4 6"}
START=$SECONDS
RESULTS=$(mktemp)   # one "step<TAB>status<TAB>seconds" line per step
step() { echo; echo "== [$((SECONDS - START)) s] $*"; T0=$SECONDS; }
done_() { printf '%s\t%s\t%s\n' "$1" "$2" "$((SECONDS - T0))" >>"$RESULTS"; [ "$2" = ok ] || echo "!! $1: $2"; }

if compgen -G ".whl/*.whl" >/dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; else echo "(.whl/ not installed)"; fi
fi
if ! "$PY" -c "import gnndist.kernels" 2>/dev/null; then
    "$PY" -c "import torch" 2>/dev/null || { echo "torch is not importable by $PY" >&2; exit 1; }
    # never let pip resolve torch: the image's CUDA build stays
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
fi
"$PY" - "$LOG/versions.json" <<'PY' || exit 1
import json, os, subprocess, sys, torch, triton, torch_geometric
assert torch.cuda.is_available() or os.environ.get("ALLOW_CPU"), "no CUDA device visible"
v = {"torch": torch.__version__, "triton": triton.__version__, "pyg": torch_geometric.__version__,
     "cuda": torch.version.cuda}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    v.update(gpu=p.name, sms=p.multi_processor_count, gib=round(p.total_memory / 2**30))
    try:
        v["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError:
        pass
print(v)
json.dump(v, open(sys.argv[1], "w"))
PY
DATA=${GNNDIST_BENCH_DATA:-../shared/data}
[ -d "$DATA/coauthor_cs" ] || DATA=.gpu/data
DATA=$(cd "$DATA" && pwd)
unset TRITON_INTERPRET GNNDIST_KERNEL
NPAR=$(( $(nproc) > 8 ? 6 : $(nproc) ))
REPO=$(pwd)
KTESTS=$(for f in ${KTESTS:-tests/test_kernels_*.py}; do echo "$REPO/$f"; done)
# as users run: the checkout's root off sys.path (tests/conftest.py refuses it), from another folder
[[ "$PY" == */* && "$PY" != /* ]] && PY="$REPO/$PY"
pytest_() { local t=$1; shift; (cd /tmp && PYTHONSAFEPATH=1 timeout "$t" "$PY" -m pytest -c "$REPO/setup.cfg" --rootdir "$REPO" "$@"); }
XDIST=""
"$PY" -c "import xdist" 2>/dev/null && XDIST="-n $NPAR"

for s in $STEPS; do case $s in
13) step "1+3. kernel tests compiled ($XDIST) beside the CLI equality and memory jobs"
    pytest_ "${T1:-170}" -q -p no:cacheprovider $XDIST $KTESTS >"$LOG/kernel_tests.txt" 2>&1 &
    KT=$!
    T1=$SECONDS
    (cd /tmp && PYTHONSAFEPATH=1 timeout "${T3:-170}" "$PY" "$REPO/scripts/gpu_jobs.py" "$LOG/jobs.json" --parallel 6 \
        --timeout 100 ${JOBS_ONLY:+--only "$JOBS_ONLY"}) 2>&1 | tail -45
    rc=${PIPESTATUS[0]}
    T2=$SECONDS; T0=$T1; [ "$rc" = 0 ] && done_ "3 jobs" ok || done_ "3 jobs" "rc $rc"
    wait $KT; rc=$?
    tail -6 "$LOG/kernel_tests.txt"; T0=$T1; [ "$rc" = 0 ] && done_ "1 kernel tests" ok || done_ "1 kernel tests" "rc $rc" ;;
1)  step "1. kernel tests, compiled Triton on CUDA ($XDIST)"
    pytest_ "${T1:-170}" -q -p no:cacheprovider $XDIST $KTESTS >"$LOG/kernel_tests.txt" 2>&1
    rc=$?; tail -6 "$LOG/kernel_tests.txt"; [ "$rc" = 0 ] && done_ "1 kernel tests" ok || done_ "1 kernel tests" "rc $rc" ;;
3)  step "3. CLI equality and memory jobs"
    (cd /tmp && PYTHONSAFEPATH=1 timeout "${T3:-170}" "$PY" "$REPO/scripts/gpu_jobs.py" "$LOG/jobs.json" --parallel 6 \
        --timeout 100 ${JOBS_ONLY:+--only "$JOBS_ONLY"}) 2>&1 | tail -45
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] && done_ "3 jobs" ok || done_ "3 jobs" "rc $rc" ;;
5)  step "5. SpMM: Triton and dispatch vs cuSPARSE, kernel time"
    timeout "${T5:-90}" "$PY" benchmarks/spmm_tiles.py --data "$DATA" ${SWEEP:+--sweep} \
        ${SPMM_GRAPHS:+--graphs "$SPMM_GRAPHS"} 2>&1 | tee "$LOG/spmm.txt" | tail -40
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] && done_ "5 spmm" ok || done_ "5 spmm" "rc $rc" ;;
4)  step "4. training step vs PyG's cached sparse CSR (and cached edge_index), fp32 and bf16, profiled"
    timeout "${T4:-170}" "$PY" benchmarks/train.py --device cuda --graphs cs,big --hidden 128 --root "$DATA" --profile \
        --precision fp32,bf16 --providers "gnndist,pyg sparse_csr cached,pyg edge_index cached" 2>&1 \
        | tee "$LOG/train.txt" | grep -v -E "^-+|  [0-9.]+(us|ms)  " | tail -30
    rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] && done_ "4 train" ok || done_ "4 train" "rc $rc" ;;
6)  step "6. cost model beside measured epochs (coauthor-cs, GCN hidden 128, P 1/2/4)"
    (cd /tmp && PYTHONSAFEPATH=1 timeout "${T6:-80}" "$PY" -m gnndist.cli bench model --root "$DATA" \
        --out /tmp/gpu-model --grid coauthor-cs:gcn:128 --parts "${MODEL_PARTS:-1,2,4}" --no-plots) 2>&1 | grep -E "model_ratio|bench:" | \
        sed -E 's/.*(P=[0-9]+, strategy=[^,]*).*(epoch_s=[^,]*).*(model_epoch_s=[^,]*).*(model_ratio=.*)/  \1 \2 \3 \4/'
    rc=${PIPESTATUS[0]}; cp /tmp/gpu-model/model.csv "$LOG/model.csv" 2>/dev/null
    [ "$rc" = 0 ] && done_ "6 model" ok || done_ "6 model" "rc $rc" ;;
2)  step "2. the rest of the suite with the GPU visible ($XDIST)"
    pytest_ "${T2:-300}" -q -p no:cacheprovider $XDIST --ignore-glob="$REPO/tests/test_kernels_*" "$REPO/tests" \
        >"$LOG/suite.txt" 2>&1
    rc=$?; tail -8 "$LOG/suite.txt"; [ "$rc" = 0 ] && done_ "2 suite" ok || done_ "2 suite" "rc $rc" ;;
*)  echo "unknown step $s (13 1 3 5 4 6 2)" ;;
esac; done
"$PY" - "$LOG" "$RESULTS" "$((SECONDS - START))" <<'PY'
import json, os, sys
log, results, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [dict(zip(("step", "status", "seconds"), line.rstrip("\n").split("\t"))) for line in open(results)]
out = {"seconds": total, "steps": steps}
for name in ("versions", "jobs"):
    p = os.path.join(log, f"{name}.json")
    if os.path.exists(p):
        d = json.load(open(p))
        out[name] = d if name == "versions" else d["verdicts"]
if os.path.exists(p := os.path.join(log, "versions.json")):
    os.remove(p)  # folded into summary.json
json.dump(out, open(os.path.join(log, "summary.json"), "w"), indent=1)
print(json.dumps(out))
PY
grep -qv $'\tok\t' "$RESULTS" && exit 1
exit 0
