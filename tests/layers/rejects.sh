#!/usr/bin/env bash
# check.sh must fail on each kind of crossing it exists to catch: a copy of
# the tree's sources gets one bad include at a time, and check.sh has to
# reject each copy, naming the file. The clean copy must pass first.
#
#   tests/layers/rejects.sh ROOT LAYER=SEEN,SEEN... ...
set -euo pipefail
root=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

copy() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree/bindings"
  cp -r "$root/src" "$tmp/tree/src"
  cp -r "$root/bindings/c" "$tmp/tree/bindings/c"
  if [[ -d $root/bindings/python ]]; then cp -r "$root/bindings/python" "$tmp/tree/bindings/python"; fi
}

copy
"$here/check.sh" "$tmp/tree" "$@" >/dev/null || { echo "rejects.sh: the clean tree fails check.sh" >&2; exit 1; }

# file, include line: an upward include in a header, one into a sibling
# backend, one that climbs out, one with no layer, and a binding reaching
# past the public API.
cases=(
  "src/shm/segment.hpp|#include \"api/nothing.hpp\""
  "src/redis/url.cpp|#include \"shm/key.hpp\""
  "src/sys/clock.cpp|#include \"base/log.hpp\""
  "src/base/log.cpp|#include \"../shm/layout.hpp\""
  "src/shm/gate.cpp|#include \"segment.hpp\""
  "bindings/python/module.cpp|#include \"shm/layout.hpp\""
)
for c in "${cases[@]}"; do
  file=${c%%|*} line=${c#*|}
  [[ -f $tmp/tree/$file ]] || { echo "rejects.sh: no $file to break" >&2; exit 1; }
  copy
  printf '%s\n' "$line" >>"$tmp/tree/$file"
  if out=$("$here/check.sh" "$tmp/tree" "$@" 2>&1); then
    echo "rejects.sh: check.sh accepted $line in $file" >&2
    exit 1
  fi
  grep -qF "$file" <<<"$out" || { echo "rejects.sh: check.sh did not name $file:" >&2; echo "$out" >&2; exit 1; }
done
echo "rejects.sh: check.sh rejected all ${#cases[@]} crossings"
