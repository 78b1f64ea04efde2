#!/usr/bin/env bash
# packaging/build-deb.sh (`make deb`): builds the Debian packages of shmsem
# from packaging/debian into <build dir>/out/, without writing anything into
# the source tree.
#
#   build dir   $SHMSEM_DEB_BUILD_DIR, default build-deb/ in the source tree
#   jobs        $JOBS, default 2
#   options     DEB_BUILD_OPTIONS is passed on: nocheck skips the test suite
#
# The source tree (without .git and build directories) is copied to
# <build dir>/stage/shmsem-<version>/, packaging/debian becomes its debian/,
# and dpkg-buildpackage -b runs there. The full log is in
# <build dir>/dpkg-buildpackage.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SHMSEM_DEB_BUILD_DIR:-$root/build-deb}
jobs=${JOBS:-2}
mkdir -p "$build"
build=$(cd "$build" && pwd)

# One version: include/shmsem/version.hpp (which CMake reads too) must agree
# with the newest debian/changelog entry.
version=$(sed -n 's/^#define SHMSEM_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]\+\)$/\2/p' \
  "$root/include/shmsem/version.hpp" | paste -sd.)
deb_version=$(dpkg-parsechangelog -l "$root/packaging/debian/changelog" -S Version)
upstream=${deb_version#*:}
upstream=${upstream%-*}
if [ "$version" != "$upstream" ]; then
  echo "build-deb: include/shmsem/version.hpp says $version but packaging/debian/changelog" \
    "says $deb_version; add a changelog entry (dch -v $version-1)" >&2
  exit 1
fi

stage=$build/stage
out=$build/out
log=$build/dpkg-buildpackage.log
rm -rf "$stage" "$out"
mkdir -p "$stage/shmsem-$version" "$out"
src=$stage/shmsem-$version

# Copy what a clone would have: no VCS data, no build trees, no debian/,
# and not the build directory itself when it lies inside the source tree.
excludes=(--exclude=./.git --exclude=./build --exclude='./build-*' --exclude='./obj-*' --exclude=./debian)
case "$build" in "$root"/*) excludes+=("--exclude=./${build#"$root"/}") ;; esac
tar -C "$root" --anchored "${excludes[@]}" -cf - . | tar -C "$src" -xf -
cp -a "$root/packaging/debian" "$src/debian"

echo "build-deb: building shmsem $deb_version in $src (DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS:-}', log: $log)"
start=$SECONDS
if ! (cd "$src" && dpkg-buildpackage -b -us -uc -J"$jobs") >"$log" 2>&1; then
  echo "build-deb: dpkg-buildpackage FAILED after $((SECONDS - start)) s; last lines of $log:" >&2
  tail -n 80 "$log" >&2
  exit 1
fi
# The test summary, when the suite ran.
grep -E '^[0-9]+% tests passed|tests failed out of' "$log" || true

shopt -s nullglob
files=("$stage"/*.deb "$stage"/*.ddeb "$stage"/*.changes "$stage"/*.buildinfo)
mv "${files[@]}" "$out"/
echo "build-deb: done in $((SECONDS - start)) s; packages in $out:"
(cd "$out" && ls -1 -- *.deb)
