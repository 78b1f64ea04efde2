#!/usr/bin/env bash
# Instructions redis-server runs per uncontended acquire+release pair of the
# Redis backend, counted by callgrind: the server's work, which timings on a
# shared machine cannot resolve. Starts a private redis-server under
# callgrind on a unix socket in a temporary folder, runs
# bench/pair_count.cpp against it for two loop lengths, and prints the
# difference divided by the extra pairs, so start-up does not count.
#
#   bench/redis-count.sh [BUILD_DIR]     (default build-release, as make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BENCH_BUILD:-build-release}}
JOBS=${JOBS:-2}
for tool in valgrind redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "redis-count.sh: needs $tool" >&2; exit 1; }
done
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSHMSEM_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target shmsem-pair-count >/dev/null
bin="$BUILD/bench/shmsem-pair-count"
tmp=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
count() {  # pairs -> instructions of the whole server run
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" redis-server --port 0 \
    --unixsocket "$tmp/sock" --save '' --appendonly no --dir "$tmp" >"$tmp/log" 2>&1 &
  server=$!
  for _ in $(seq 600); do
    redis-cli -s "$tmp/sock" PING >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
    sleep 0.1
  done
  "$bin" acquire "$1" "redis+unix://$tmp/sock?key=bench.redis_count.$$"
  redis-cli -s "$tmp/sock" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$server" || true
  server=
  sed -n 's/^summary: //p' "$tmp/out" | awk '{print $1 + 0}'
  rm -f "$tmp/out" "$tmp/sock"
}
small=$(count 1000)
large=$(count 3000)
awk -v a="$small" -v b="$large" \
  'BEGIN { printf "redis-server %8.0f instructions per acquire+release pair\n", (b - a) / 2000 }'
