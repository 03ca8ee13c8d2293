#!/usr/bin/env bash
# The checks for a machine with a CUDA GPU, offline: build the example kernels with their
# CUDA variants, run the gpu tests (pytest -m gpu), the quickstart, the warm-import cost of
# reading the device's arch (benchmarks/bench_device_arch.py) and the rest of the suite,
# then write a summary: each step's result and counts, and the torch, CUDA and GPU
# it ran on. Every step runs even when one before it failed; the summary is written
# however the script ends. Exits 1 when a step failed.
#
# Needs the environment scripts/dev-env.sh makes (a CUDA build of torch in .venv, and
# nvcc); it installs nothing. Settings: PYTHON (default .venv/bin/python), GPU_CHECK_OUT
# (default gpu-check/: the logs, the summary, the quickstart's files), GPU_CHECK_WORKERS
# (pytest workers, default 8).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
OUT=${GPU_CHECK_OUT:-gpu-check}
WORKERS=${GPU_CHECK_WORKERS:-8}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
RESULTS=$OUT/results.txt
: >"$RESULTS"
failed=0

facts() {
  echo "gpu-check of $(git rev-parse --short HEAD 2>/dev/null || echo 'an unknown commit'), $(date -u '+%Y-%m-%d %H:%M UTC')"
  "$PYTHON" - <<'EOF' 2>/dev/null || echo "torch: $PYTHON could not import it"
import subprocess, sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
# the device is asked about in a child, as the tests do
probe = (
    "import torch\n"
    "n = torch.cuda.device_count()\n"
    "first = (torch.cuda.get_device_name(0), *torch.cuda.get_device_capability(0)) if n else ()\n"
    "print(n, 'CUDA devices', '(the first: %s, capability %d.%d)' % first if n else '')\n"
)
child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
print("torch sees", child.stdout.strip() or f"no CUDA device: {child.stderr.strip()[-300:]}")
sys.path.insert(0, "examples/kernels")
from _buildlib import cuda_arch_list, cuda_backend
backend, why_not = cuda_backend()
print(f"CUDA builds: {backend} for archs {cuda_arch_list()}" if backend else f"CUDA builds: none, {why_not}")
EOF
  if command -v nvidia-smi >/dev/null; then
    echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 4 | paste -sd ';')"
  else
    echo "nvidia-smi: not found"
  fi
  echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version | tail -n 1) || echo 'not found')"
  echo "CUDA_HOME: ${CUDA_HOME:-unset}, TORCH_CUDA_ARCH_LIST: ${TORCH_CUDA_ARCH_LIST:-unset}"
}

write_summary() {
  { facts; echo; cat "$RESULTS"; echo; echo "logs: $OUT/<step>.log"; } >"$SUMMARY"
  cat "$SUMMARY"
}
trap write_summary EXIT

# run NAME TIMEOUT COMMAND...: log to $OUT/NAME.log; record the exit status, the seconds
# taken and, for pytest, its closing counts ("12 passed, 1 failed, 3 skipped").
run() {
  local name=$1 limit=$2 start status counts
  shift 2
  echo "== $name: $*"
  start=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  status=$?
  counts=$(grep -E '^=*.*[0-9]+ (passed|failed|error|skipped|deselected)' "$OUT/$name.log" | tail -n 1 | tr -d '=' | sed 's/^ *//')
  [ "$status" -eq 124 ] && counts="timed out after ${limit}s; $counts"
  # On a GPU machine a gpu test that did not run is a failure too.
  if [ "$name" = gpu-tests ] && [ "$status" -eq 0 ] && ! grep -q passed <<<"$counts"; then
    status=1 counts="no gpu test ran: $counts"
  fi
  [ "$status" -ne 0 ] && failed=1
  printf '%-11s %-4s %4ss  %s\n' "$name" "$([ "$status" -eq 0 ] && echo ok || echo FAIL)" \
    "$(($(date +%s) - start))" "${counts:-exit status $status}" >>"$RESULTS"
}

run build 900 "$PYTHON" examples/kernels/build_all.py --cuda
run gpu-tests 900 "$PYTHON" -m pytest -q -m gpu -n "$WORKERS" -rs
# The quickstart keeps its mirror and caches beside FLASHHUB_CACHE_DIR: here, under $OUT.
run quickstart 600 env FLASHHUB_CACHE_DIR="$OUT/cache" "$PYTHON" examples/quickstart.py
grep -E ' v[0-9]+: (variant|no variant)|    why: |CUDA variants| on (cuda|cpu).*codes=' "$OUT/quickstart.log" \
  | sed 's/^/             /' >>"$RESULTS"
# What reading the device's arch adds to a warm import, and that no import starts CUDA.
run device-arch 300 "$PYTHON" benchmarks/bench_device_arch.py --runs 15
grep -E '^device:|median|over the plain|contexts' "$OUT/device-arch.log" | sed 's/^/             /' >>"$RESULTS"
run suite 1200 "$PYTHON" -m pytest -q -m "not gpu" -n "$WORKERS"
exit "$failed"
