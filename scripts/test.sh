#!/usr/bin/env bash
# `make test`: every check CI runs, in order, stopping at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
step() { printf '\n==== %s\n' "$*"; }

step "format check"
scripts/format.sh check

step "build (RelWithDebInfo)"
# Tests and benchmarks are off by default (CMakeLists.txt): asked for here.
# The benchmark binary's smoke pass (label bench) is part of the suite.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMSEM_BUILD_TESTS=ON \
  -DSHMSEM_BUILD_BENCH=ON >/dev/null
cmake --build build -j"$JOBS"

step "test suite (normal build)"
ctest --test-dir build -j"$JOBS" --output-on-failure --timeout 600

step "build without the Redis backend (SHMSEM_WITH_REDIS=OFF)"
# A library for shared memory alone: it must build, link no hiredis
# (unit.no_hiredis_linked), refuse Redis URLs clearly (no_redis_test) and
# pass the shared-memory suite. The bindings' suites ran above.
cmake -S . -B build-noredis -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMSEM_WITH_REDIS=OFF \
  -DSHMSEM_BUILD_TESTS=ON -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_BUILD_PYTHON=OFF -DSHMSEM_BUILD_NODE=OFF \
  -DSHMSEM_BUILD_EXAMPLES=OFF -DSHMSEM_INSTALL=OFF >/dev/null
cmake --build build-noredis -j"$JOBS"

step "test suite (without Redis)"
ctest --test-dir build-noredis -j"$JOBS" --output-on-failure --timeout 600 -LE 'package|bench'

step "build (AddressSanitizer + UndefinedBehaviorSanitizer)"
# The sanitizer builds skip the Python package and its tests
# (SHMSEM_BUILD_PYTHON defaults to OFF with SHMSEM_SANITIZE): an instrumented
# extension module cannot load into Debian's uninstrumented python3 without
# preloading libasan; the library under it is tested here by the C and C++
# suites. The Python suite runs in the normal build above (label python).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHMSEM_SANITIZE=address,undefined \
  -DSHMSEM_BUILD_TESTS=ON -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_INSTALL=OFF >/dev/null
cmake --build build-asan -j"$JOBS"

step "test suite (ASan + UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -j"$JOBS" --output-on-failure --timeout 900 -LE 'package|bench'

step "build (ThreadSanitizer)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSHMSEM_SANITIZE=thread \
  -DSHMSEM_BUILD_TESTS=ON -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_BUILD_TOOLS=OFF -DSHMSEM_INSTALL=OFF >/dev/null
cmake --build build-tsan -j"$JOBS" --target thread-tests

step "thread tests (TSan)"
# TSan does not follow fork(): a forked child of a threaded parent may
# deadlock inside the TSan runtime. Only the `thread` label (threads of one
# process, no fork) runs here.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan -j"$JOBS" --output-on-failure --timeout 600 -L thread

# Each fuzzer runs 30 s from its seed corpus here: a regression check that
# keeps the whole of `make test` inside CI's 40 minutes on two cores. Longer
# runs: FUZZ_SECONDS=600 tests/fuzz/run.sh.
export FUZZ_SECONDS=${FUZZ_SECONDS:-30}
for extra in scripts/static-check.sh tests/fuzz/run.sh tests/package/run.sh; do
  step "$extra"
  # A step that cannot run is a failure, not a step left out.
  if [ ! -x "$extra" ]; then
    echo "test.sh: FAILED: $extra is missing or not executable (lost its exec bit?)" >&2
    exit 1
  fi
  "$extra"
done
step "all checks passed"
