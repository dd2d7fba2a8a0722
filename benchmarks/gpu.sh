#!/usr/bin/env bash
# The GPU check (issue 41): all-reduce busbw across every GPU (NCCL's default and Ring), the
# training workload's bf16 MFU with the largest preset that fits, and a Lightning program through
# the step hook with the hook's cost. One JSON file and a Markdown table under --out (default
# ./gpu-check). At most 8 minutes: it is stopped at 480 s. --small shrinks every size to run on
# a CPU (the tests do). What it measures and how: benchmarks/gpu_check.py.
#
#   benchmarks/gpu.sh [--small] [--out DIR] [--peak-tflops T]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=${DTRUN_PYTHON:-}
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python=$here/.venv/bin/python; else python=python3; fi
fi
exec timeout --signal=TERM --kill-after=10 480 "$python" "$here/benchmarks/gpu_check.py" "$@"
