#!/usr/bin/env bash
# A build without the Redis backend links no hiredis: neither as a library
# it needs (the shared library, the tools) nor compiled in (the tools embed
# the library with hiredis's archive when Redis is on).
#   tests/unit/no_hiredis_linked.sh FILE...
set -euo pipefail
bad=0
for f in "$@"; do
  [[ -f $f ]] || { echo "no_hiredis_linked: $f is missing" >&2; exit 1; }
  # Read whole before grep: with pipefail, grep -q leaving early would fail
  # the writer with SIGPIPE and hide the match.
  dynamic=$(readelf -d "$f")
  symbols=$(nm -C "$f" 2>/dev/null || true)
  if grep -q 'NEEDED.*hiredis' <<<"$dynamic"; then
    echo "no_hiredis_linked: $f needs libhiredis" >&2
    bad=1
  fi
  if grep -qE ' (T|t|U) redisConnect' <<<"$symbols"; then
    echo "no_hiredis_linked: $f contains or calls hiredis (redisConnect)" >&2
    bad=1
  fi
done
((bad == 0)) && echo "no_hiredis_linked: none of $# files links hiredis"
exit $bad
