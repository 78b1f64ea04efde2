#!/usr/bin/env bash
# clang-tidy and cppcheck over src/ and bindings/c, with the committed configuration
# (.clang-tidy, scripts/cppcheck-suppressions.txt). Any finding fails.
# Configures build-static (configure only, no compile) for the compile
# commands.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
# Its own configuration, one compile command per file: in a unity build
# the database names only the batches, and clang-tidy would guess each
# file's flags (its layer's include path among them) from a neighbour.
DB=build-static
cmake -S . -B "$DB" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DSHMSEM_UNITY_BUILD=OFF -DSHMSEM_BUILD_TESTS=OFF \
  -DSHMSEM_BUILD_TOOLS=OFF -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_BUILD_EXAMPLES=OFF \
  -DSHMSEM_BUILD_PYTHON=OFF -DSHMSEM_BUILD_NODE=OFF -DSHMSEM_INSTALL=OFF >/dev/null
TIDY=$(command -v clang-tidy-14 || command -v clang-tidy)
# Not src/fake: the test build's layer, which this configuration (no tests)
# does not compile, so it has no compile command here (cppcheck reads it).
mapfile -t files < <(ls src/*/*.cpp bindings/c/*.cpp | grep -v '^src/fake/')

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
echo "static-check: clang-tidy on ${#files[@]} files"
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$JOBS" -n 1 "$TIDY" -p "$DB" --quiet >"$LOG" 2>&1 || status=1
if [ $status -ne 0 ] || grep -qE "(warning|error):" "$LOG"; then
  grep -E "(warning|error):" -A3 "$LOG" || tail -40 "$LOG"
  echo "static-check: clang-tidy FAILED"
  exit 1
fi

echo "static-check: cppcheck on src/"
cppcheck --quiet --error-exitcode=1 --std=c++20 --language=c++ -j "$JOBS" \
  --enable=warning,performance,portability --inline-suppr \
  --suppressions-list=scripts/cppcheck-suppressions.txt \
  -I include -I src -D__linux__ -DSHMSEM_TESTING src bindings/c
echo "static-check: clean"
