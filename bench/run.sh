#!/usr/bin/env bash
# `make bench`: builds shmsem-bench in Release (its own build tree, apart
# from the test build) and runs the whole comparison of shmsem against its
# peers. Prints Google Benchmark's output, then the markdown ratio table
# with the targets checked. Writes the raw Google Benchmark JSON and
# the table into the build tree.
#
#   bench/run.sh [shmsem-bench flags]      e.g. --benchmark_filter=AcquireRelease
#   BENCH_BUILD=dir JOBS=n bench/run.sh    build tree (default build-release), jobs (2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BENCH_BUILD:-build-release}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DSHMSEM_BUILD_BENCH=ON -DSHMSEM_BUILD_TESTS=OFF -DSHMSEM_BUILD_TOOLS=ON \
  -DSHMSEM_BUILD_EXAMPLES=OFF -DSHMSEM_INSTALL=OFF >/dev/null
# Tools on: shmsem-bench runs the shmsem tool for its command-line row.
cmake --build "$BUILD" -j"$JOBS" --target shmsem-bench

# Which source was measured, for the report.
SHMSEM_BENCH_REVISION=${SHMSEM_BENCH_REVISION:-$(git describe --always --dirty 2>/dev/null || echo "unknown revision")}
export SHMSEM_BENCH_REVISION

json="$BUILD/bench/results.json"
table="$BUILD/bench/results.md"
status=0
"$BUILD/bench/shmsem-bench" --benchmark_out="$json" --benchmark_out_format=json \
  --benchmark_context=revision="$SHMSEM_BENCH_REVISION" --table_out="$table" "$@" || status=$?
echo
echo "raw Google Benchmark JSON: $json"
echo "markdown table:            $table"
exit "$status"
