#!/usr/bin/env bash
# GPU tier for the kernels: compiled Triton vs the reference at larger shapes, then the
# aggregation benchmark on CUDA. Runs in a fresh copy of the repo on a GPU machine;
# sets up its own environment and should finish in < 8 minutes on an H200.
#
#   bash scripts/gpu_check.sh            # tests + benchmark (F = 16 ... 512, 3 graphs)
#   QUICK=1 bash scripts/gpu_check.sh    # tests + benchmark --quick
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi

# Install only what is missing: never reinstall an importable torch (it brings the CUDA build).
if ! "$PY" -c "import gnndist.kernels" 2>/dev/null; then
    if ! "$PY" -c "import torch" 2>/dev/null; then
        echo "torch is not importable by $PY; install a CUDA build of torch first" >&2
        exit 1
    fi
    "$PY" -m pip install -q -e ".[dev]"
fi
"$PY" -c "import triton" 2>/dev/null || "$PY" -m pip install -q "triton>=3.0"
"$PY" - <<'PY'
import torch, triton
assert torch.cuda.is_available(), "no CUDA device visible"
print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
PY

unset TRITON_INTERPRET GNNDIST_KERNEL
echo "== kernel tests (compiled Triton on CUDA, incl. the cuda tier)"
timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/test_kernels_*.py -x

echo "== aggregation benchmark (CUDA)"
DATA=${GNNDIST_BENCH_DATA:-/work/shared/data}
GRAPHS=power-law
if [ -d "$DATA/coauthor_cs" ]; then GRAPHS="coauthor-cs,astro-ph,power-law"; fi
if [ -n "${QUICK:-}" ]; then
    timeout 240 "$PY" benchmarks/kernels.py --device cuda --data "$DATA" --graphs "$GRAPHS" --quick
else
    timeout 240 "$PY" benchmarks/kernels.py --device cuda --data "$DATA" --graphs "$GRAPHS" --widths 16,64,128,256,512
    timeout 60 "$PY" benchmarks/kernels.py --device cuda --data "$DATA" --graphs power-law --widths 128 --dtype bf16 --index-dtype int32
fi
