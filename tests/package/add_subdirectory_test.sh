#!/usr/bin/env bash
# ctest package.add_subdirectory: a project that vendors the shmsem source
# tree with add_subdirectory() builds and runs a semaphore across two
# processes, and gets none of shmsem's tests, tools or install rules (they
# are on by default only when shmsem is the top-level project).
#
# usage: add_subdirectory_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$1
work=$2
cmake=${CMAKE_COMMAND:-cmake}
jobs=${JOBS:-2}
die() {
  echo "add_subdirectory_test: FAILED: $*" >&2
  exit 1
}
key=pkgtest.subdir.$$.$RANDOM
trap '[ -x "$work/build/two_process" ] && "$work/build/two_process" --remove "$key" >/dev/null 2>&1; true' EXIT

rm -rf "$work"
mkdir -p "$work"
"$cmake" -S "$here/add_subdirectory" -B "$work/build" -DSHMSEM_SOURCE_DIR="$source_dir" \
  -DCMAKE_BUILD_TYPE=Release >"$work/build.log" || { cat "$work/build.log"; die "the consumer does not configure"; }
for opt in SHMSEM_BUILD_TESTS SHMSEM_BUILD_TOOLS SHMSEM_BUILD_BENCH SHMSEM_BUILD_EXAMPLES SHMSEM_INSTALL; do
  grep -q "^$opt:BOOL=OFF\$" "$work/build/CMakeCache.txt" || die "$opt is not OFF in a vendoring project"
done
"$cmake" --build "$work/build" -j"$jobs" >>"$work/build.log" || { cat "$work/build.log"; die "the consumer does not build"; }
timeout 60 "$work/build/two_process" "$key"

# Installing the consumer installs the consumer, and nothing of shmsem's.
"$cmake" --install "$work/build" --prefix "$work/prefix" >/dev/null
installed=$(cd "$work/prefix" && find . -type f -o -type l | sort)
[ "$installed" = "./bin/two_process" ] || die "installing the consumer installed more than its program: $installed"
# Nothing but the library was built: no test or tool programs.
! find "$work/build/shmsem" -type f -executable \( -name '*_test' -o -name semtop -o -name shmsem \) | grep . ||
  die "a vendoring build built shmsem's tests or tools"
echo "add_subdirectory_test: ok"
