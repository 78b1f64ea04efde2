#!/usr/bin/env bash
# The layer rule of the library, checked on the text of every source file,
# headers included (a header is compiled only where an upper layer includes
# it, so the build alone would let an upward include in a header through).
#
#   tests/layers/check.sh ROOT LAYER=SEEN,SEEN... ...
#
# Each LAYER=... argument is a row of src/CMakeLists.txt's table: the layers
# whose headers a file of LAYER may include (its own among them). A private
# include is written "layer/file.hpp"; a file may not climb out of its folder
# ("../"), and the language bindings other than the C ABI, which sit on the
# public API, include no private header at all. Prints every offending line
# with its file and line, and exits 1 if there is one.
set -euo pipefail
root=$1
shift
declare -A sees
for row in "$@"; do
  sees[${row%%=*}]=",${row#*=},"
done
[[ ${#sees[@]} -gt 0 ]] || { echo "check.sh: no layer table given" >&2; exit 2; }

folder_of() {  # layer -> its folder under root
  if [[ $1 == c ]]; then echo bindings/c; else echo "src/$1"; fi
}

bad=0
include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)"'
report() { echo "$1:$2: $3" >&2; bad=1; }

for layer in "${!sees[@]}"; do
  dir=$root/$(folder_of "$layer")
  [[ -d $dir ]] || { report "$dir" 0 "the layer $layer has no folder"; continue; }
  while IFS=: read -r file line text; do
    [[ $text =~ $include_re ]] || continue
    inc=${BASH_REMATCH[1]}
    if [[ $inc == *../* || $inc == ./* ]]; then
      report "${file#"$root"/}" "$line" "\"$inc\" climbs out of the layer's folder"
    elif [[ $inc != */* ]]; then
      report "${file#"$root"/}" "$line" "\"$inc\" names no layer (write \"layer/$inc\")"
    elif [[ ${sees[$layer]} != *",${inc%%/*},"* ]]; then
      report "${file#"$root"/}" "$line" "\"$inc\": the layer $layer may not include the layer ${inc%%/*}"
    fi
  done < <(grep -Hn '#[[:space:]]*include[[:space:]]*"' "$dir"/*.cpp "$dir"/*.hpp 2>/dev/null || true)
done

# Bindings over the public API: <shmsem/...> only.
for dir in "$root"/bindings/python "$root"/bindings/node/src; do
  [[ -d $dir ]] || continue
  while IFS=: read -r file line text; do
    [[ $text =~ $include_re ]] || continue
    inc=${BASH_REMATCH[1]}
    case ${inc%%/*} in
      sys | base | shm | redis | api | c | src | ..)
        report "${file#"$root"/}" "$line" "\"$inc\": a binding includes only the public headers <shmsem/...>" ;;
    esac
  done < <(grep -Hn '#[[:space:]]*include[[:space:]]*"' "$dir"/*.cpp "$dir"/*.hpp "$dir"/*.h 2>/dev/null || true)
done

if ((bad)); then
  echo "check.sh: includes that cross a layer (the table is in src/CMakeLists.txt)" >&2
  exit 1
fi
echo "check.sh: every include stays within its layer's table"
