#!/bin/sh
# Build the driver and the benchmark, render an 8-GPU H100 node with its live layer, then run
# the benchmark against it (nice'd: it measures, it should not hog).
#   bench/run.sh [BATCHES]        (needs the mock NVML library built: make -C ../nvml-engine/native)
#   OTHER_DRIVER=/path/to/libcuda.so.1 bench/run.sh [BATCHES]
#                                 then the same cases against another fake libcuda (another
#                                 project's, built from its source; its own directory on the
#                                 loader's path), in the same run, for comparison
set -eu
here=$(cd "$(dirname "$0")" && pwd)
native="$here/../native"
python=${PYTHON:-python3}
make -s -C "$native" driver PYTHON="$python"
include=$(make -s -C "$native" print-cuda-include PYTHON="$python")
out="$native/build/cuda_bench"
${CC:-cc} -O2 -std=c11 -D__CUDA_API_VERSION_INTERNAL -I"$include" -o "$out" "$here/cuda_bench.c" -ldl
node=$(mktemp -d)
trap 'rm -rf "$node"' EXIT
"$python" - "$node" <<'PY'
import sys
from pathlib import Path

import nvml_mock_live as live
from nvml_mock_engine.config import resolve_config
from nvml_mock_engine.render import render_text

root = Path(sys.argv[1])
state = root / "state.nvmlmock"
state.write_text(render_text(resolve_config(node="bench", profile="h100", count=8)))
live.create(root / live.LIVE_FILE_NAME, live.read_board(state))
PY
nvml=$("$python" -c 'from nvml_mock_engine.library import library_path; print(library_path().parent)')
echo "== nvml-mock-cuda"
MOCK_NVML_CONFIG="$node/state.nvmlmock" NVML_MOCK_LOCK_DIR="$node/locks" LD_LIBRARY_PATH="$nvml" \
    nice "$out" "$here/../src/nvml_mock_cuda/_lib/libcuda.so.1" "${1:-200}"
if [ -n "${OTHER_DRIVER:-}" ]; then
    echo "== $OTHER_DRIVER"
    LD_LIBRARY_PATH=$(dirname "$OTHER_DRIVER") nice "$out" "$OTHER_DRIVER" "${1:-200}" 2>/dev/null | grep -E '^(fork|empty|cu)'
fi
