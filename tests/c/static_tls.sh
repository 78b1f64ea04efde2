#!/usr/bin/env bash
# The library's TLS block stays small. Because the fast path reaches one
# variable with the initial-exec model, glibc must place the library's whole
# TLS block in static TLS; when the library is loaded with dlopen, only a
# few hundred bytes of that are left. A large thread_local anywhere in the
# library would make dlopen fail again ("cannot allocate memory in static
# TLS block"): keep such data on the heap.
#
# Usage: static_tls.sh LIBRARY MAX_BYTES
set -euo pipefail
lib=$1 max=$2
memsz=$(readelf -lW "$lib" | awk '$1 == "TLS" {print $6}')
size=$((${memsz:-0}))
echo "static_tls: $lib has a TLS block of $size bytes (limit $max)"
[ "$size" -le "$max" ]
