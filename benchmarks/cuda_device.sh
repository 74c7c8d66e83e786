#!/usr/bin/env bash
# The CUDA device check, run on a machine with an NVIDIA GPU (the workplace's `device` tool runs it in
# the repository root; $OUT is a folder whose files come back): versions, a smoke run, every CUDA test, then
# the speed report beside torch and Triton. TESTS and BENCH cap each part's seconds.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CI=1
OUT=${OUT:-/tmp/svod-cuda}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
python3 -c "import sys, numpy, llvmlite, cuda.bindings, torch, triton; print(sys.version.split()[0], 'numpy', numpy.__version__, 'llvmlite', llvmlite.__version__, 'cuda-bindings', cuda.bindings.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
python3 - <<'PY'
import svod
from svod.backends.cuda import find_ptxas
print("ptxas:", find_ptxas())
d = svod.get_device("CUDA:0"); print("opened", d.name)
from svod.workloads import check, saxpy, softmax
for w in (saxpy(1000), softmax(37, 1000)):
    check(w, d); print("smoke", w.name, "ok")
PY
timeout "${TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -n "${WORKERS:-14}" --timeout 120 -rfE \
    -k "${SELECT:-CUDA or cuda}" tests > "$OUT/tests.log" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | sed 's/ - .\{0,160\}$//' | head -60
tail -3 "$OUT/tests.log"
timeout "${BENCH:-200}" python3 -m svod bench --suite kernels --device CUDA:0 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -60
