#!/usr/bin/env bash
# Instructions per uncontended acquire+release pair, counted by callgrind:
# the hot-path figure that must not grow by more than 2% in any change.
# Runs bench/pair_count.cpp for two loop lengths and prints the difference
# divided by the extra pairs, so start-up and the warm-up do not count.
#
#   bench/callgrind.sh [BUILD_DIR]     (default build-release, as make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BENCH_BUILD:-build-release}}
JOBS=${JOBS:-2}
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DSHMSEM_BUILD_BENCH=ON -DSHMSEM_BUILD_TESTS=OFF -DSHMSEM_BUILD_TOOLS=OFF \
  -DSHMSEM_BUILD_EXAMPLES=OFF -DSHMSEM_INSTALL=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target shmsem-pair-count >/dev/null
bin="$BUILD/bench/shmsem-pair-count"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {  # mode pairs -> instructions of the measured loop
  valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/out.%p" \
    "$bin" "$1" "$2" >/dev/null 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
  local total=0 f n
  for f in "$tmp"/out.*; do
    n=$(sed -n 's/^summary: //p' "$f" | awk '{s+=$1} END {print s+0}')
    total=$((total + n))
  done
  rm -f "$tmp"/out.*
  echo "$total"
}
# locked: a segment with fencing tokens, whose every grant takes the lock
# (the locked path's cost, which the rule above does not bound).
for mode in acquire ttl try locked; do
  small=$(count "$mode" 10000)
  large=$(count "$mode" 110000)
  awk -v m="$mode" -v a="$small" -v b="$large" \
    'BEGIN { printf "%-8s %8.1f instructions per acquire+release pair\n", m, (b - a) / 100000 }'
done
