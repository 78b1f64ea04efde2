#!/usr/bin/env bash
# ctest package.prefix_install: `cmake --install` a configured and built
# shmsem tree into a fresh prefix, then build consumers against that prefix
# only, the way fmt's find-package-test does: one with find_package(shmsem),
# a C++ and a C one with pkg-config, and (when the build has the Python
# package) the Python consumer with the prefix's package. Each runs a
# semaphore across two processes. When the build has the tools, the
# installed semtop and shmsem must start from the prefix as they are: no
# LD_LIBRARY_PATH, no ldconfig (semtop's RUNPATH finds the prefix's
# library; shmsem embeds its own copy, and loads no C++ library at all).
#
# usage: prefix_install_test.sh BUILD_DIR WORK_DIR [tools]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1
work=$2
with_tools=${3:-}
cmake=${CMAKE_COMMAND:-cmake}
jobs=${JOBS:-2}
die() {
  echo "prefix_install_test: FAILED: $*" >&2
  exit 1
}
key=pkgtest.prefix.$$.$RANDOM
cleanup() {
  local k
  for k in "$key.cmake" "$key.pc" "$key.c" "$key.py"; do
    [ -x "$work/cmake/two_process" ] && "$work/cmake/two_process" --remove "$k" >/dev/null 2>&1
  done
  true
}
trap cleanup EXIT

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; die "cmake --install failed"; }

# Only the public headers are installed (C++ and the C ABI's shmsem.h).
diff <(cd "$root/include" && find shmsem -name '*.hpp' -o -name '*.h' | sort) <(cd "$prefix/include" && find . -type f | sed 's|^\./||' | sort) ||
  die "the installed headers differ from include/shmsem (< source only, > installed only)"
config=$(find "$prefix" -name shmsemConfig.cmake)
pc=$(find "$prefix" -name shmsem.pc)
[ -n "$config" ] || die "no shmsemConfig.cmake under $prefix"
[ -n "$pc" ] || die "no shmsem.pc under $prefix"
for f in shmsemConfigVersion.cmake shmsemTargets.cmake; do
  [ -f "$(dirname "$config")/$f" ] || die "no $f beside $config"
done
cmp -s "$root/LICENSE" "$prefix/share/doc/shmsem/LICENSE" || die "no copy of LICENSE in $prefix/share/doc/shmsem"
libdir=$(dirname "$(find "$prefix" -name 'libshmsem.so.0')")
[ -L "$libdir/libshmsem.so" ] || die "no libshmsem.so link in $libdir"

# The installed tools start from the prefix alone, and load its library.
if [ "$with_tools" = tools ]; then
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/shmsem" --version 2>&1) || die "the installed shmsem does not start: $out"
  echo "$out"
  [[ "$out" == "shmsem "[0-9]* ]] || die "the installed shmsem --version printed '$out'"
  out=$(env -u LD_LIBRARY_PATH "$prefix/bin/semtop" --help 2>&1) || die "the installed semtop does not start: $out"
  [[ "$out" == *--once* ]] || die "the installed semtop --help printed '$out'"
  # Relative, so that the prefix can move; and this prefix's library, not
  # one that happens to be installed elsewhere.
  runpath=$(readelf -d "$prefix/bin/semtop" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$runpath" = "\$ORIGIN/$(realpath --relative-to="$prefix/bin" "$libdir")" ] ||
    die "$prefix/bin/semtop has RUNPATH '$runpath', not \$ORIGIN/<bin to lib>"
  loaded=$(env -u LD_LIBRARY_PATH ldd "$prefix/bin/semtop" | awk '$1 == "libshmsem.so.0" {print $3}')
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libshmsem.so.0")" ] ||
    die "$prefix/bin/semtop loads libshmsem.so.0 from '$loaded', not from $libdir"
  # Each job under `shmsem run` pays shmsem's start-up, which loading and
  # relocating libshmsem, libstdc++, fmt, spdlog and hiredis dominated.
  needed=$(readelf -d "$prefix/bin/shmsem" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  for lib in $needed; do
    case $lib in
      libc.so.* | libm.so.* | ld-linux*) ;;
      *) die "$prefix/bin/shmsem loads $lib (it needs only libc and libm: $needed)" ;;
    esac
  done
fi

# find_package consumer: must find this prefix and load this prefix's library.
"$cmake" -S "$here/find_package" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" ||
  { cat "$work/cmake.log"; die "the find_package consumer does not configure"; }
grep -q "found in $(dirname "$config")\$" "$work/cmake.log" || {
  cat "$work/cmake.log"
  die "find_package(shmsem) did not find the config in $prefix"
}
"$cmake" --build "$work/cmake" -j"$jobs" >>"$work/cmake.log" || { cat "$work/cmake.log"; die "the find_package consumer does not build"; }
ldd "$work/cmake/two_process" | grep "libshmsem.so.0 => $libdir/libshmsem.so.0" >/dev/null ||
  die "the find_package consumer does not load $libdir/libshmsem.so.0"
timeout 60 "$work/cmake/two_process" "$key.cmake"
timeout 60 "$work/cmake/logging_consumer"

# pkg-config consumer: the .pc must point into the prefix given at install time.
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(pkg-config --variable=prefix shmsem)" = "$prefix" ] ||
  die "shmsem.pc says prefix=$(pkg-config --variable=prefix shmsem), not $prefix"
[ "$(pkg-config --variable=libdir shmsem)" = "$libdir" ] ||
  die "shmsem.pc says libdir=$(pkg-config --variable=libdir shmsem), not $libdir"
echo "pkg-config --cflags --libs shmsem: $(pkg-config --cflags --libs shmsem)"
# docs/install.md quotes what shmsem.pc gives under /usr: it must stay true.
DESTDIR="$work/usr-root" "$cmake" --install "$build" --prefix /usr --component shmsem_development >/dev/null
usr_flags=$(PKG_CONFIG_PATH=$(dirname "$(find "$work/usr-root" -name shmsem.pc)") pkg-config --cflags --libs shmsem)
usr_flags=$(echo $usr_flags)  # one space between words, none at the end
tr '\n' ' ' <"$root/docs/install.md" | tr -s ' ' | grep -qF "\`$usr_flags\`" ||
  die "docs/install.md does not quote what pkg-config prints under /usr: \`$usr_flags\`"
mkdir -p "$work/pc"
make -s -C "$here/pkg_config" O="$work/pc" LDFLAGS="-Wl,-rpath,$libdir" || die "the pkg-config consumer does not build"
ldd "$work/pc/two_process" | grep "libshmsem.so.0 => $libdir/libshmsem.so.0" >/dev/null ||
  die "the pkg-config consumer does not load $libdir/libshmsem.so.0"
timeout 60 "$work/pc/two_process" "$key.pc"
ldd "$work/pc/two_process_c" | grep "libshmsem.so.0 => $libdir/libshmsem.so.0" >/dev/null ||
  die "the C pkg-config consumer does not load $libdir/libshmsem.so.0"
timeout 60 "$work/pc/two_process_c" "$key.c"

# The Python package, if the build made it: under the prefix's Python path,
# importable from there alone, loading the prefix's library.
module=$(find "$prefix" -name '_shmsem.*.so' 2>/dev/null | head -n 1)
if [ -n "$module" ]; then
  site=$(dirname "$(dirname "$module")")
  case "$site" in "$prefix"/lib/python3*/*-packages) ;; *) die "the Python package went to $site" ;; esac
  loaded=$(ldd "$module" | awk '$1 == "libshmsem.so.0" {print $3}')
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libshmsem.so.0")" ] ||
    die "$module loads '$loaded', not $libdir/libshmsem.so.0"
  (cd "$work" && PYTHONPATH=$site timeout 60 /usr/bin/python3 "$here/consumer/two_process.py" "$key.py") ||
    die "the Python consumer failed with the package in $site"
fi

# The Node package, if the build made it: a folder named shmsem under the
# prefix's lib/nodejs, found by name through NODE_PATH, loading the prefix's
# library.
addon=$(find "$prefix" -name 'shmsem.node' 2>/dev/null | head -n 1)
if [ -n "$addon" ]; then
  nodedir=$(dirname "$(dirname "$(dirname "$(dirname "$addon")")")")
  [ "$nodedir" = "$libdir/nodejs" ] || die "the Node package went to $nodedir, not $libdir/nodejs"
  loaded=$(ldd "$addon" | awk '$1 == "libshmsem.so.0" {print $3}')
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libshmsem.so.0")" ] ||
    die "$addon loads '$loaded', not $libdir/libshmsem.so.0"
  (cd "$work" && env -u SHMSEM_NODE_ADDON NODE_PATH=$nodedir timeout 60 node "$here/consumer/two_process.js" "$key.js") ||
    die "the Node consumer failed with the package in $nodedir"
fi
echo "prefix_install_test: ok"
