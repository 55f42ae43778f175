#!/usr/bin/env bash
# The GPU tier, in one shot on a CUDA machine (< 8 minutes on an H200), from a bare copy of the repo
# (run in the order 1 5 4 3 2):
#   1. the kernel tests compiled by Triton (incl. the cuda-only large cases)
#   2. the rest of the test suite with the GPU visible
#   3. gnndist run cora --ranks 1 and --ranks 2 on this machine (ranks share a GPU when
#      there is one): the two final losses must be equal
#   4. the training step against PyG on the GPU (2M nodes / 40M edges, F = hidden = 128)
#   5. the SpMM kernel against cuSPARSE (benchmarks/spmm_tiles.py)
#
#   bash scripts/gpu_check.sh                  # everything; logs under $OUT (or ./gpu_check.out)
#   STEPS="1 5" bash scripts/gpu_check.sh      # a subset
#   SWEEP=1 PROFILE=1 bash scripts/gpu_check.sh   # + every tile set the tuning timed (step 5), profiler tables (step 4)
#   ALLOW_CPU=1 STEPS=3 bash scripts/gpu_check.sh  # dry run of the plumbing on a machine without a GPU
#
# The image needs torch (CUDA build), Triton and PyG. pymetis and ogb may be missing there:
# put their wheels in .whl/ (see benchmarks/README.md, "GPU") and they are installed to
# /tmp/site first. Coauthor CS is read from $GNNDIST_BENCH_DATA (default ../shared/data,
# else .gpu/data when the data travelled with the repo).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PY=.venv/bin/python
fi
LOG=${OUT:-gpu_check.out}
mkdir -p "$LOG"
# the measurements never taken yet first, the long suite last: a run cut short by its time
# limit still brings back the numbers
STEPS=${STEPS:-"1 5 4 3 2"}
START=$SECONDS
status=0
step() { echo; echo "== [$((SECONDS - START)) s] $*"; }
fail() { echo "!! $*"; status=1; }

if compgen -G ".whl/*.whl" >/dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; else echo "(.whl/ not installed)"; fi
fi
if ! "$PY" -c "import gnndist.kernels" 2>/dev/null; then
    "$PY" -c "import torch" 2>/dev/null || { echo "torch is not importable by $PY" >&2; exit 1; }
    # never let pip resolve torch: the image's CUDA build stays
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
fi
"$PY" - <<'PY' || exit 1
import os, torch, triton, torch_geometric
assert torch.cuda.is_available() or os.environ.get("ALLOW_CPU"), "no CUDA device visible"
if not torch.cuda.is_available():
    raise SystemExit(print(f"torch {torch.__version__}, triton {triton.__version__}: no GPU (ALLOW_CPU dry run)"))
p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__}, triton {triton.__version__}, PyG {torch_geometric.__version__}, "
      f"{p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")
PY
DATA=${GNNDIST_BENCH_DATA:-../shared/data}
[ -d "$DATA/coauthor_cs" ] || DATA=.gpu/data
unset TRITON_INTERPRET GNNDIST_KERNEL
NPAR=$(( $(nproc) > 8 ? 8 : $(nproc) ))
REPO=$(pwd)
# as users run: the checkout's root off sys.path (tests/conftest.py refuses it), from another folder
[[ "$PY" == */* && "$PY" != /* ]] && PY="$REPO/$PY"
pytest_() { local t=$1; shift; (cd /tmp && PYTHONSAFEPATH=1 timeout "$t" "$PY" -m pytest -c "$REPO/setup.cfg" --rootdir "$REPO" "$@"); }
gnndist_() { local t=$1; shift; (cd /tmp && PYTHONSAFEPATH=1 timeout "$t" "$PY" -m gnndist.cli "$@"); }
XDIST=""
"$PY" -c "import xdist" 2>/dev/null && XDIST="-n $NPAR"

for s in $STEPS; do case $s in
1)  step "1. kernel tests, compiled Triton on CUDA ($XDIST)"
    pytest_ 240 -q -p no:cacheprovider $XDIST "$REPO"/tests/test_kernels_*.py 2>&1 | tail -25 \
        | tee "$LOG/kernel_tests.txt"; [ "${PIPESTATUS[0]}" = 0 ] || fail "kernel tests" ;;
2)  step "2. the rest of the suite with the GPU visible ($XDIST)"
    pytest_ 300 -q -p no:cacheprovider $XDIST --ignore-glob="$REPO/tests/test_kernels_*" "$REPO/tests" 2>&1 \
        | tail -25 | tee "$LOG/suite.txt"; [ "${PIPESTATUS[0]}" = 0 ] || fail "test suite" ;;
3)  step "3. gnndist run cora: --ranks 1 and --ranks 2 on $("$PY" -c 'import torch; print(torch.cuda.device_count())') GPU(s)"
    for n in 1 2; do
        GNNDIST_DATA=/tmp/gnndist-cora gnndist_ 150 run cora --ranks "$n" --epochs 50 --json \
            >"$LOG/cora_p$n.out" 2>"$LOG/cora_p$n.err" || fail "cora --ranks $n"
        tail -4 "$LOG/cora_p$n.err"; tail -1 "$LOG/cora_p$n.out" >"$LOG/cora_p$n.json"
    done
    "$PY" - "$LOG" <<'PY' || fail "cora --ranks 2 differs from --ranks 1"
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/cora_p{n}.json")) for n in (1, 2))
la, lb = a["final_loss"], b["final_loss"]
print(f"final loss: --ranks 1 {la!r}, --ranks 2 {lb!r}; test acc {a['test_acc']:.4f} / {b['test_acc']:.4f}; "
      f"{a['epoch_time_s'] * 1e3:.1f} / {b['epoch_time_s'] * 1e3:.1f} ms per epoch")
assert abs(la - lb) <= 1e-5 * max(1.0, abs(la)), "losses differ"
PY
    ;;
4)  step "4. training step vs PyG on the GPU"
    timeout 240 "$PY" benchmarks/train.py --device cuda --graphs cs,big --hidden 128 --root "$DATA" \
        ${PROFILE:+--profile} 2>&1 | tee "$LOG/train.txt" | tail -40; [ "${PIPESTATUS[0]}" = 0 ] || fail "train bench" ;;
5)  step "5. SpMM: Triton vs cuSPARSE, kernel time"
    timeout 240 "$PY" benchmarks/spmm_tiles.py --data "$DATA" ${SWEEP:+--sweep} 2>&1 | tee "$LOG/spmm.txt" | tail -60
    [ "${PIPESTATUS[0]}" = 0 ] || fail "spmm bench" ;;
esac; done
step "done, status $status"
exit $status
