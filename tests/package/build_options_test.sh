#!/usr/bin/env bash
# ctest package.build_options: a top-level build configured with no options
# builds the library, the tools, the examples and the install rules, but
# not the test suite nor the benchmarks, which are most of the build time
# (fmt and spdlog do the same); `make test` and `make bench` ask for them.
#
# usage: build_options_test.sh SOURCE_DIR WORK_DIR
set -euo pipefail
source_dir=$1
work=$2
cmake=${CMAKE_COMMAND:-cmake}
die() {
  echo "build_options_test: FAILED: $*" >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
# Python off only to keep the check quick; it does not change these defaults.
"$cmake" -S "$source_dir" -B "$work/build" -DSHMSEM_BUILD_PYTHON=OFF >"$work/configure.log" ||
  { cat "$work/configure.log"; die "the default build does not configure"; }
cache=$work/build/CMakeCache.txt
for opt in SHMSEM_BUILD_TESTS SHMSEM_BUILD_BENCH; do
  grep -qx "$opt:BOOL=OFF" "$cache" || die "$opt is not OFF by default: $(grep "^$opt:" "$cache")"
done
for opt in SHMSEM_BUILD_TOOLS SHMSEM_BUILD_EXAMPLES SHMSEM_INSTALL; do
  grep -qx "$opt:BOOL=ON" "$cache" || die "$opt is not ON by default: $(grep "^$opt:" "$cache")"
done
targets=$("$cmake" --build "$work/build" --target help)
for t in shmsem semtop shmsem_cli shmsem-demo; do
  grep -q "^\.\.\. $t\$" <<<"$targets" || die "the default build has no target $t"
done
! grep -E '^\.\.\. ([a-z_]+_test|shmsem-bench|shmsem_testing)$' <<<"$targets" ||
  die "the default build has test or benchmark targets (above)"
[ ! -f "$work/build/CTestTestfile.cmake" ] || ! grep -q add_test -r "$work/build" --include=CTestTestfile.cmake ||
  die "the default build registers tests"
echo "build_options_test: ok"
