#!/usr/bin/env bash
# clang-tidy and cppcheck over src/, with the committed configuration
# (.clang-tidy, scripts/cppcheck-suppressions.txt). Any finding fails.
# Uses build/compile_commands.json when the build exported one, else
# configures build-static (configure only, no compile) to get it.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
DB=build
if [ ! -f "$DB/compile_commands.json" ]; then
  DB=build-static
  cmake -S . -B "$DB" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DSHMSEM_BUILD_TESTS=OFF \
    -DSHMSEM_BUILD_TOOLS=OFF -DSHMSEM_BUILD_BENCH=OFF -DSHMSEM_BUILD_EXAMPLES=OFF \
    -DSHMSEM_INSTALL=OFF >/dev/null
fi
TIDY=$(command -v clang-tidy-14 || command -v clang-tidy)
mapfile -t files < <(ls src/*.cpp src/sys/*.cpp src/redis/*.cpp)

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
  -I include -I src -D__linux__ -DSHMSEM_TESTING src
echo "static-check: clean"
