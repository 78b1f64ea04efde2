#!/usr/bin/env bash
# tests/package/run.sh (`make package-test`, and the last step of `make
# test`): the Debian packages from the outside, as a user meets them.
#
#   1. build libshmsem0, libshmsem-dev, shmsem-tools, python3-shmsem and
#      node-shmsem (packaging/build-deb.sh)
#   2. check their contents and dependencies, and run lintian (errors and
#      undocumented warnings fail; the documented ones are lintian overrides
#      in packaging/debian/ and are listed in docs/install.md)
#   3. dpkg -i them, then from /usr only:
#      - a find_package(shmsem) consumer and pkg-config consumers in C++
#        and C, each running one semaphore across two processes; a
#        consumer of <shmsem/logging.hpp>
#      - `import shmsem` with /usr/bin/python3 and a two-process acquire
#      - `require('shmsem')` with /usr/bin/node and a two-process acquire
#      - semtop --once and shmsem --help from the PATH; man -w semtop
#   4. dpkg --purge them and check that nothing of theirs is left.
#
# Needs root (dpkg). Work files go to $SHMSEM_PACKAGE_TEST_DIR (default
# build-pkgtest/ in the source tree). SHMSEM_PACKAGE_TEST_DEBS=<dir> tests
# the packages already in <dir> instead of building them. The packages are built with
# DEB_BUILD_OPTIONS=nocheck: the suite they would run is the one `make test`
# ran just before (and `make deb` runs it in the package build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/package
work=${SHMSEM_PACKAGE_TEST_DIR:-$root/build-pkgtest}
jobs=${JOBS:-2}
packages=(libshmsem0 libshmsem-dev shmsem-tools python3-shmsem node-shmsem)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
start=$SECONDS

step() { printf '\n== package-test: %s (%d s)\n' "$*" $((SECONDS - start)); }
die() {
  echo "package-test: FAILED: $*" >&2
  exit 1
}
is_installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
# run with a time limit, so that a hang fails instead of stalling CI
limit() { timeout --kill-after=10 "$@"; }

[ "$(id -u)" -eq 0 ] || die "must run as root: it installs and purges packages with dpkg"

keys=()
holder_pid=
cleanup() {
  local rc=$?
  set +e
  [ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null
  if [ $rc -ne 0 ]; then
    # Remove our semaphores while the library is still there, then the packages.
    local tool=$work/consumer-cmake/two_process
    for k in "${keys[@]}"; do [ -x "$tool" ] && "$tool" --remove "$k" >/dev/null 2>&1; done
    for p in "${packages[@]}"; do
      if dpkg-query -W "$p" >/dev/null 2>&1; then
        echo "package-test: purging $p after the failure" >&2
        dpkg --purge "${packages[@]}" >/dev/null 2>&1
        break
      fi
    done
  fi
  exit $rc
}
trap cleanup EXIT

rm -rf "$work"
mkdir -p "$work"

# ---------------------------------------------------------------- build
if [ -n "${SHMSEM_PACKAGE_TEST_DEBS:-}" ]; then
  # For working on this script: test packages built earlier by `make deb`.
  step "using the packages in $SHMSEM_PACKAGE_TEST_DEBS"
  out=$SHMSEM_PACKAGE_TEST_DEBS
else
  step "build the packages (DEB_BUILD_OPTIONS=nocheck)"
  SHMSEM_DEB_BUILD_DIR=$work/deb DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" \
    DEB_BUILD_PROFILES="nocheck ${DEB_BUILD_PROFILES:-}" JOBS=$jobs "$root/packaging/build-deb.sh"
  out=$work/deb/out
fi
version=$(dpkg-parsechangelog -l "$root/packaging/debian/changelog" -S Version)
declare -A deb
for p in "${packages[@]}"; do
  deb[$p]=$out/${p}_${version}_${arch}.deb
  [ -f "${deb[$p]}" ] || die "make deb did not produce ${deb[$p]##*/}"
done
for p in libshmsem0 python3-shmsem node-shmsem; do
  ls "$out/$p"-dbgsym_*.deb >/dev/null 2>&1 || die "no $p-dbgsym package was built"
done

# ---------------------------------------------------------------- contents
step "package contents and dependencies"
contents() { dpkg-deb --fsys-tarfile "$1" | tar -t | sed 's|^\./|/|'; }
for p in "${packages[@]}"; do contents "${deb[$p]}" >"$work/$p.files"; done

# libshmsem0: the library named for its SONAME, and nothing to develop with.
mkdir -p "$work/unpacked"
dpkg-deb -x "${deb[libshmsem0]}" "$work/unpacked/libshmsem0"
real_lib=$(find "$work/unpacked/libshmsem0" -type f -name 'libshmsem.so.*')
soname=$(objdump -p "$real_lib" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = libshmsem.so.0 ] || die "libshmsem0 ships a library with SONAME '$soname', not libshmsem.so.0"
grep -q "^/usr/lib/$multiarch/libshmsem.so.0$" "$work/libshmsem0.files" || die "libshmsem0 lacks libshmsem.so.0"
! grep -Eq '\.so$|/include/|\.pc$|/cmake/' "$work/libshmsem0.files" || die "libshmsem0 carries development files"

# libshmsem-dev: exactly the public headers (C++ and the C ABI's shmsem.h),
# the .so link, CMake and pkg-config files.
diff <(cd "$root/include" && find shmsem -name '*.hpp' -o -name '*.h' | sort) \
  <(sed -n 's|^/usr/include/\(shmsem/.*\.h\(pp\)\?\)$|\1|p' "$work/libshmsem-dev.files" | sort) ||
  die "libshmsem-dev's headers differ from include/shmsem/*.hpp, *.h (above: < source only, > package only)"
grep -qx /usr/include/shmsem/shmsem.h "$work/libshmsem-dev.files" || die "libshmsem-dev lacks shmsem.h"
! grep -q '^/usr/include/.*[^/]$' <(grep -v '^/usr/include/shmsem/.*\.h\(pp\)\?$' "$work/libshmsem-dev.files") ||
  die "libshmsem-dev installs non-public files under /usr/include"
for f in "/usr/lib/$multiarch/libshmsem.so" "/usr/lib/$multiarch/pkgconfig/shmsem.pc" \
  "/usr/lib/$multiarch/cmake/shmsem/shmsemConfig.cmake" "/usr/lib/$multiarch/cmake/shmsem/shmsemConfigVersion.cmake" \
  "/usr/lib/$multiarch/cmake/shmsem/shmsemTargets.cmake"; do
  grep -qx "$f" "$work/libshmsem-dev.files" || die "libshmsem-dev lacks $f"
done

# shmsem-tools: both tools and their man pages. (The tools are built from
# tools/; if they are missing here, tools/CMakeLists.txt does not install them.)
for f in /usr/bin/semtop /usr/bin/shmsem /usr/share/man/man1/semtop.1.gz /usr/share/man/man1/shmsem.1.gz; do
  grep -qx "$f" "$work/shmsem-tools.files" || die "shmsem-tools lacks $f"
done

# Each package carries the license, as Debian packages do: in its
# copyright file, and in no second file.
for p in "${packages[@]}"; do
  grep -qx "/usr/share/doc/$p/copyright" "$work/$p.files" || die "$p lacks /usr/share/doc/$p/copyright"
  ! grep -q 'LICENSE' "$work/$p.files" || die "$p carries a second copy of the license"
done
mkdir -p "$work/unpacked/shmsem-tools"
dpkg-deb -x "${deb[shmsem-tools]}" "$work/unpacked/shmsem-tools"
grep -q '^License: Expat$' "$work/unpacked/shmsem-tools/usr/share/doc/shmsem-tools/copyright" ||
  die "shmsem-tools' copyright file does not state the MIT (Expat) license"

# python3-shmsem: the package where Debian's python3 finds it, with its stubs.
pydir=/usr/lib/python3/dist-packages/shmsem
for f in __init__.py __init__.pyi _asyncio.py _bounded.py _types.py py.typed; do
  grep -qx "$pydir/$f" "$work/python3-shmsem.files" || die "python3-shmsem lacks $pydir/$f"
done
grep -Eq "^$pydir/_shmsem\.cpython-3[0-9]+-$multiarch\.so\$" "$work/python3-shmsem.files" ||
  die "python3-shmsem lacks the extension module in $pydir"
! grep -Eq '\.so\.|/include/|/usr/bin/' "$work/python3-shmsem.files" ||
  die "python3-shmsem carries files of the other packages"

# node-shmsem: the package where Debian's node finds C++ addons, the addon
# where lib/native.js looks for it, and a link where nodesource's node looks.
nodedir=/usr/lib/$multiarch/nodejs/shmsem
for f in package.json lib/index.js lib/index.d.ts lib/native.js build/Release/shmsem.node; do
  grep -qx "$nodedir/$f" "$work/node-shmsem.files" || die "node-shmsem lacks $nodedir/$f"
done
grep -qx /usr/lib/node/shmsem "$work/node-shmsem.files" || die "node-shmsem lacks the link /usr/lib/node/shmsem"
! grep -Eq '\.so\.|/include/|/usr/bin/|node_modules' "$work/node-shmsem.files" ||
  die "node-shmsem carries files of the other packages, or node_modules"

# Depends: the runtime libraries the shared library needs, and no others.
depends() { dpkg-deb -f "${deb[$1]}" Depends; }
echo "libshmsem0 Depends:    $(depends libshmsem0)"
echo "libshmsem-dev Depends: $(depends libshmsem-dev)"
echo "shmsem-tools Depends:  $(depends shmsem-tools)"
echo "python3-shmsem Depends: $(depends python3-shmsem)"
echo "node-shmsem Depends:   $(depends node-shmsem)"
for d in libc6 libstdc++6 libspdlog1 libfmt9; do
  depends libshmsem0 | grep "\b$d" >/dev/null || die "libshmsem0 does not depend on $d"
done
! depends libshmsem0 | grep -Eq 'ncurses|tinfo|boost|gtest' || die "libshmsem0 has a dependency it does not need"
depends libshmsem-dev | grep "libshmsem0 (= $version)" >/dev/null || die "libshmsem-dev does not pin libshmsem0 (= $version)"
depends libshmsem-dev | grep 'libspdlog-dev' >/dev/null || die "libshmsem-dev does not depend on libspdlog-dev (logging.hpp)"
depends shmsem-tools | grep "libshmsem0 (>= ${version%-*})" >/dev/null ||
  die "shmsem-tools does not depend on libshmsem0 (>= ${version%-*}) (shlibs)"
depends python3-shmsem | grep "libshmsem0 (>= ${version%-*})" >/dev/null ||
  die "python3-shmsem does not depend on libshmsem0 (>= ${version%-*}) (shlibs)"
depends python3-shmsem | grep -E 'python3 \(>= 3\.[0-9]+~\)' >/dev/null ||
  die "python3-shmsem does not depend on the python3 it was built for (dh_python3)"
depends node-shmsem | grep "libshmsem0 (>= ${version%-*})" >/dev/null ||
  die "node-shmsem does not depend on libshmsem0 (>= ${version%-*}) (shlibs)"
depends node-shmsem | grep 'nodejs (>= 18)' >/dev/null || die "node-shmsem does not depend on nodejs (>= 18)"

# ---------------------------------------------------------------- lintian
step "lintian"
# Errors fail, and so do warnings: each warning that stays is a documented
# override in packaging/debian/*.lintian-overrides (and in docs/install.md).
# (Judged from the output: with --show-overrides, --fail-on would count the
# overridden warnings too.)
lintian_out=$work/lintian.txt
limit 600 lintian --display-info --show-overrides "$out"/*.changes >"$lintian_out" 2>&1 ||
  { cat "$lintian_out"; die "lintian did not run"; }
grep -v 'running with root privileges' "$lintian_out" || true
! grep -Eq '^(E|W): ' "$lintian_out" || die "lintian reported errors or undocumented warnings (E:/W: above)"

# ---------------------------------------------------------------- install
step "dpkg -i"
for p in "${packages[@]}"; do
  if dpkg-query -W "$p" >/dev/null 2>&1; then
    echo "$p is installed already; purging it first so that the test starts clean"
    dpkg --purge "${packages[@]}"
    break
  fi
done
# A clean start: none of the packages' files may exist before the install,
# or the check after the purge would prove nothing.
cat "$work"/{libshmsem0,libshmsem-dev,shmsem-tools,python3-shmsem,node-shmsem}.files | grep -v '/$' >"$work/all.files"
while read -r f; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || die "$f exists before the packages are installed"
done <"$work/all.files"
dpkg -i "${deb[libshmsem0]}" "${deb[libshmsem-dev]}" "${deb[shmsem-tools]}" "${deb[python3-shmsem]}" \
  "${deb[node-shmsem]}"
for p in "${packages[@]}"; do is_installed "$p" || die "$p is not installed after dpkg -i"; done
ldconfig -p | grep "libshmsem.so.0 .*=> /.*/$multiarch/libshmsem.so.0" >/dev/null || die "ldconfig does not know libshmsem.so.0"

# ---------------------------------------------------------------- consumers
key_base=pkgtest.$$.$RANDOM

step "find_package consumer (CMake, from /usr)"
keys+=("$key_base.cmake")
limit 300 cmake -S "$here/find_package" -B "$work/consumer-cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/consumer-cmake.log" ||
  { cat "$work/consumer-cmake.log"; die "the find_package consumer does not configure"; }
grep 'shmsem .* found in' "$work/consumer-cmake.log"
grep -q "found in /usr/lib/$multiarch/cmake/shmsem\$" "$work/consumer-cmake.log" ||
  die "find_package(shmsem) did not use the installed package's config"
limit 300 cmake --build "$work/consumer-cmake" -j"$jobs" >>"$work/consumer-cmake.log" ||
  { cat "$work/consumer-cmake.log"; die "the find_package consumer does not build"; }
ldd "$work/consumer-cmake/two_process" | grep "libshmsem.so.0 => /.*$multiarch/libshmsem.so.0" >/dev/null ||
  die "the consumer does not load the installed libshmsem.so.0"
limit 60 "$work/consumer-cmake/two_process" "$key_base.cmake"
limit 60 "$work/consumer-cmake/logging_consumer"

step "pkg-config consumer (from /usr)"
keys+=("$key_base.pc")
echo "pkg-config --modversion shmsem: $(pkg-config --modversion shmsem)"
echo "pkg-config --cflags --libs shmsem: $(pkg-config --cflags --libs shmsem)"
[ "$(pkg-config --modversion shmsem)" = "${version%-*}" ] || die "shmsem.pc has the wrong version"
[ "$(pkg-config --variable=libdir shmsem)" = "/usr/lib/$multiarch" ] || die "shmsem.pc has the wrong libdir"
mkdir -p "$work/consumer-pc"
limit 300 make -s -C "$here/pkg_config" O="$work/consumer-pc" || die "the pkg-config consumers do not build"
limit 60 "$work/consumer-pc/two_process" "$key_base.pc"
keys+=("$key_base.c")
ldd "$work/consumer-pc/two_process_c" | grep "libshmsem.so.0 => /.*$multiarch/libshmsem.so.0" >/dev/null ||
  die "the C consumer does not load the installed libshmsem.so.0"
limit 60 "$work/consumer-pc/two_process_c" "$key_base.c"

step "Python: import shmsem with /usr/bin/python3 (from /usr)"
keys+=("$key_base.py")
# From an empty directory and without PYTHONPATH: only the installed package can answer.
mkdir -p "$work/python"
where=$(cd "$work/python" && env -u PYTHONPATH /usr/bin/python3 -c 'import shmsem; print(shmsem.__file__)') ||
  die "/usr/bin/python3 cannot import shmsem"
[ "$where" = "$pydir/__init__.py" ] || die "/usr/bin/python3 imported shmsem from $where, not $pydir"
(cd "$work/python" && env -u PYTHONPATH timeout --kill-after=10 60 /usr/bin/python3 "$here/consumer/two_process.py" "$key_base.py") ||
  die "the Python consumer failed"

step "Node: require('shmsem') with /usr/bin/node (from /usr)"
keys+=("$key_base.js")
# From an empty directory, without NODE_PATH or the build's addon: only the
# installed package can answer.
mkdir -p "$work/node"
where=$(cd "$work/node" && env -u NODE_PATH -u SHMSEM_NODE_ADDON /usr/bin/node -p "require.resolve('shmsem')") ||
  die "/usr/bin/node cannot require shmsem"
case "$where" in
  "$nodedir"/lib/index.js | /usr/lib/node/shmsem/lib/index.js) ;;
  *) die "/usr/bin/node required shmsem from $where, not $nodedir" ;;
esac
(cd "$work/node" && env -u NODE_PATH -u SHMSEM_NODE_ADDON timeout --kill-after=10 60 /usr/bin/node \
  "$here/consumer/two_process.js" "$key_base.js") || die "the Node consumer failed"

# ---------------------------------------------------------------- tools
step "semtop and shmsem from the PATH"
for t in semtop shmsem; do
  [ "$(command -v "$t")" = "/usr/bin/$t" ] || die "$t is not /usr/bin/$t on the PATH (found: '$(command -v "$t")')"
done
key=$key_base.tools
keys+=("$key")
coproc HOLDER { exec "$work/consumer-cmake/two_process" --hold "$key"; }
holder_pid=$HOLDER_PID
read -r -t 30 ready <&"${HOLDER[0]}" || true
[ "${ready:-}" = held ] || die "the seat holder for the tools test did not start"
limit 30 semtop --once >"$work/semtop.txt" || { cat "$work/semtop.txt"; die "semtop --once failed"; }
cat "$work/semtop.txt"
grep -qF "$key" "$work/semtop.txt" || die "semtop --once does not show the semaphore $key"
limit 30 shmsem --help >"$work/shmsem-help.txt" || { cat "$work/shmsem-help.txt"; die "shmsem --help failed"; }
head -n 5 "$work/shmsem-help.txt"
grep -q 'run' "$work/shmsem-help.txt" || die "shmsem --help does not mention the run command"
eval "exec ${HOLDER[1]}>&-"
wait "$holder_pid" || die "the seat holder failed"
holder_pid=
for page in semtop shmsem; do
  path=$(man -w "$page") || die "man -w $page finds no man page"
  echo "man -w $page: $path"
  [ "$path" = "/usr/share/man/man1/$page.1.gz" ] || die "man -w $page found $path, not the packaged page"
done

# The consumers that keep a service cache until they exit (the C++
# bounded() call, the Node service) removed keys they still had open: their
# token files stay until a sweep. The installed tool sweeps them, and only them.
limit 30 shmsem gc --token-files >"$work/gc.txt" || { cat "$work/gc.txt"; die "shmsem gc --token-files failed"; }
cat "$work/gc.txt"
grep -q '^removed [0-9]* token files of removed semaphores$' "$work/gc.txt" ||
  die "shmsem gc --token-files did not say what it removed"
limit 30 shmsem gc --token-files --dry-run | grep -qx 'would remove 0 token files of removed semaphores' ||
  die "shmsem gc --token-files left token files of removed semaphores"

# ---------------------------------------------------------------- purge
# Where the segments of our keys would be, asked while the library is here.
for k in "${keys[@]}"; do "$work/consumer-cmake/two_process" --path "$k"; done >"$work/segments.txt"

step "dpkg --purge"
dpkg --purge "${packages[@]}"
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ -z "$status" ] || [ "$status" = not-installed ] || die "$p is '$status' after the purge, not gone"
  ! ls /var/lib/dpkg/info/"$p".* /var/lib/dpkg/info/"$p":*.* >/dev/null 2>&1 || die "dpkg still has control files of $p"
done
left=0
while read -r f; do
  if [ -e "$f" ] || [ -L "$f" ]; then
    echo "left behind: $f" >&2
    left=1
  fi
done <"$work/all.files"
# Directories of our own (shared ones such as /usr/bin stay, as they should).
for d in /usr/include/shmsem "/usr/lib/$multiarch/cmake/shmsem" /usr/share/doc/libshmsem0 \
  /usr/share/doc/libshmsem-dev /usr/share/doc/shmsem-tools /usr/share/doc/python3-shmsem "$pydir" \
  /usr/share/doc/node-shmsem "$nodedir" /usr/lib/node/shmsem; do
  [ ! -e "$d" ] || {
    echo "left behind: $d" >&2
    left=1
  }
done
[ $left -eq 0 ] || die "the purge left files behind"
! ldconfig -p | grep libshmsem >/dev/null || die "ldconfig still lists libshmsem after the purge"
while read -r seg; do
  [ ! -e "$seg" ] || die "a consumer left its semaphore segment $seg behind"
done <"$work/segments.txt"

step "all package checks passed"
