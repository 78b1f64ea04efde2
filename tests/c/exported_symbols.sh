#!/usr/bin/env bash
# The dynamic symbols libshmsem.so defines, checked the way an ABI checker
# would: the C symbols are exactly the functions shmsem.h declares, and
# exactly the reviewed list in c_symbols.txt (adding or removing one is an
# ABI change: update both on purpose); every other symbol belongs to the
# C++ API, namespace shmsem.
#
# Usage: exported_symbols.sh LIBRARY HEADER LIST
set -euo pipefail
lib=$1 header=$2 list=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/all"
grep -v '^_Z' "$tmp/all" >"$tmp/c" || true
grep '^_Z' "$tmp/all" >"$tmp/cxx" || true
sed -n 's/^SHMSEM_API [^(]*[ *]\(shmsem_[a-z_0-9]*\)(.*/\1/p' "$header" | sort -u >"$tmp/header"
grep -v '^#' "$list" | sed '/^$/d' | sort -u >"$tmp/list"

status=0
if ! diff -u "$tmp/list" "$tmp/c" >"$tmp/d1"; then
  echo "exported_symbols: the library's C symbols (+) differ from $list (-):"
  cat "$tmp/d1"
  status=1
fi
if ! diff -u "$tmp/list" "$tmp/header" >"$tmp/d2"; then
  echo "exported_symbols: the functions $header declares (+) differ from $list (-):"
  cat "$tmp/d2"
  status=1
fi
# The C++ API: _ZN6shmsem (functions, data), _ZNK6shmsem (const members),
# and the type_info, type_info name, vtable and thunks of shmsem's classes.
grep -Ev '^_Z(N|NK|TIN|TSN|TVN|Thn[0-9]+_N|Tv[0-9n_]+N)6shmsem' "$tmp/cxx" >"$tmp/foreign" || true
if [ -s "$tmp/foreign" ]; then
  echo "exported_symbols: C++ symbols outside namespace shmsem are exported (src/libshmsem.map):"
  c++filt <"$tmp/foreign" | head -50
  status=1
fi
c++filt <"$tmp/cxx" >"$tmp/cxx.demangled"
for must in 'shmsem::Semaphore::open(' 'shmsem::Permit::release()' 'typeinfo for shmsem::AcquisitionError'; do
  grep -qF "$must" "$tmp/cxx.demangled" || {
    echo "exported_symbols: the C++ API lacks $must"
    status=1
  }
done
echo "exported_symbols: $(wc -l <"$tmp/c") C symbols, $(wc -l <"$tmp/cxx") C++ symbols"
exit $status
