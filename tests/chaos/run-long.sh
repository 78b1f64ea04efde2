#!/usr/bin/env bash
# `make chaos`: the long chaos configurations. Builds the harness (in
# build-chaos-long, with the test hooks) and runs it for 10 minutes
# contended on a quiet host, 10 minutes contended on a busy one (waves of
# 1,500 short-lived processes on another semaphore beside it), and 5
# minutes uncontended, with more workers, threads and kills than the short
# runs of `make test`.
# Any flag given here is passed on and overrides the defaults, e.g.
#   tests/chaos/run-long.sh --duration 3600 --workers 12
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${CHAOS_BUILD:-build-chaos-long}
JOBS=${JOBS:-2}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMSEM_BUILD_TESTS=ON -DSHMSEM_TEST_DIRS=chaos \
  -DSHMSEM_BUILD_TOOLS=OFF -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_BUILD_EXAMPLES=OFF \
  -DSHMSEM_INSTALL=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target shmsem-chaos
# Three runs: contended (waiters queue, the locked path hands seats over),
# the same on a loaded host, then uncontended (the lock-free path carries
# the load). Later flags win, so the caller's override these.
CHAOS="$BUILD/tests/chaos/shmsem-chaos"
"$CHAOS" --duration 600 --workers 8 --threads 4 --capacity 6 \
  --max-n 3 --kill-interval-ms 100 --cs-kill-percent 30 --min-kills 3000 --min-cs-kills 300 "$@"
"$CHAOS" --duration 600 --workers 8 --threads 4 --capacity 6 \
  --max-n 3 --kill-interval-ms 100 --cs-kill-percent 30 --min-kills 3000 --min-cs-kills 300 \
  --load-procs 1500 --load-pause-ms 1000 "$@"
exec "$CHAOS" --duration 300 --workers 8 --threads 4 --capacity 128 \
  --max-n 3 --kill-interval-ms 100 --cs-kill-percent 30 --min-kills 1500 --min-cs-kills 150 "$@"
