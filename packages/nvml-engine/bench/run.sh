#!/bin/sh
# Build the library and the benchmark, then run it (nice'd: it measures, it should not hog).
#   bench/run.sh [ITERATIONS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
native="$here/../native"
make -s -C "$native"
include=$(make -s -C "$native" print-nvml-include)
out="$native/build/nvml_bench"
${CC:-cc} -O2 -std=c11 -pthread -I"$include" -I"$native/src" -o "$out" "$here/nvml_bench.c" -ldl
exec nice "$out" "$here/../src/nvml_mock_engine/_lib/libnvidia-ml.so.1" "${1:-2000000}"
