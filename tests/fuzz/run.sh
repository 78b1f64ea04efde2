#!/usr/bin/env bash
# Builds the libFuzzer targets with clang++-14 (ASan + UBSan + libFuzzer;
# the g++ CMake build cannot) and runs each for FUZZ_SECONDS (default 60)
# from a copy of its committed seed corpus, so runs never write into the
# source tree. Fails on any crash, leak, timeout or sanitizer report.
#   FUZZ_SECONDS=300 tests/fuzz/run.sh          # longer
#   tests/fuzz/run.sh key_fuzz                  # one target
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SECONDS_EACH=${FUZZ_SECONDS:-60}
OUT=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
CXX=${FUZZ_CXX:-clang++-14}
JOBS=${JOBS:-2}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(segment_fuzz key_fuzz)

command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found (apt-get install clang-14 libfuzzer-14-dev)"; exit 1; }
mkdir -p "$OUT/obj"
FLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT/include" -I"$ROOT/src"
       -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSHMSEM_BUILDING_LIBRARY)

# The whole library, instrumented for coverage (fuzzer-no-link): its parts
# refer to each other (the C interface to the service layer), so a partial
# set does not link. Without the Redis backend (as -DSHMSEM_WITH_REDIS=OFF
# builds it: the fuzzers read segments and keys, and its Lua comes from a
# file the CMake build generates). key.cpp and layout.cpp
# alone (all key_fuzz needs); the rest in batches of 10 sources, each
# compiled as one translation unit, as the CMake build does (unity build):
# the shared headers are compiled once per batch. A batch is rebuilt only
# when its list of sources changed (a file added or removed shifts the
# batches), or one of them or a header is newer than its object.
stale() {  # obj unit-text src... -> true if obj must be rebuilt
  local obj=$1 text=$2
  shift 2
  [ ! -f "$obj" ] || [ "$(cat "$obj.cpp" 2>/dev/null)" != "$text" ] && return 0
  local s
  for s in "$@"; do [ "$s" -nt "$obj" ] && return 0; done
  [ -n "$(find "$ROOT/src" "$ROOT/include" -name '*.hpp' -newer "$obj" -print -quit)" ]
}
pids=()
compile() {  # obj src... : compiles the sources as one translation unit, JOBS at a time
  local obj=$1
  shift
  local text
  text=$(printf '#include "%s"\n' "$@")
  stale "$obj" "$text" "$@" || return 0
  printf '%s\n' "$text" >"$obj.cpp"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer-no-link -c "$obj.cpp" -o "$obj" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
}
compile "$OUT/obj/key.o" "$ROOT/src/shm/key.cpp" "$ROOT/src/base/key_syntax.cpp"
compile "$OUT/obj/layout.o" "$ROOT/src/shm/layout.cpp"
lib_objs=("$OUT/obj/key.o" "$OUT/obj/layout.o")
mapfile -t rest < <(ls "$ROOT"/src/*/*.cpp "$ROOT"/bindings/c/*.cpp |
  grep -v -e '/src/shm/key\.cpp$' -e '/src/shm/layout\.cpp$' -e '/src/base/key_syntax\.cpp$' \
    -e '/src/redis/')
for ((i = 0; i < ${#rest[@]}; i += 10)); do
  obj="$OUT/obj/batch$((i / 10)).o"
  lib_objs+=("$obj")
  compile "$obj" "${rest[@]:i:10}"
done
for p in "${pids[@]}"; do wait "$p"; done

# Built one after the other, then run side by side: one core each.
run_targets=()
run_works=()
run_pids=()
for t in "${targets[@]}"; do
  echo "fuzz: building $t"
  case $t in
    key_fuzz) objs=("$OUT/obj/key.o" "$OUT/obj/layout.o") ;;
    *) objs=("${lib_objs[@]}") ;;
  esac
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "$ROOT/tests/fuzz/$t.cpp" "${objs[@]}" \
    -lspdlog -lfmt -pthread -o "$OUT/$t"
done
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "$ROOT/tests/fuzz/corpus/$t" "$work/corpus"
  mkdir -p "$work/artifacts"
  echo "fuzz: running $t for ${SECONDS_EACH}s from $(ls "$work/corpus" | wc -l) seeds"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$OUT/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1 &
  run_targets+=("$t")
  run_works+=("$work")
  run_pids+=($!)
done
status=0
for i in "${!run_pids[@]}"; do
  t=${run_targets[$i]}
  work=${run_works[$i]}
  if wait "${run_pids[$i]}"; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$work/log" | tail -2 | sed "s/^/fuzz: $t: /"
    echo "fuzz: $t: clean"
    rm -rf "$work"
  else
    tail -60 "$work/log"
    echo "fuzz: $t: FAILED; the crashing input is in $work/artifacts/"
    status=1
  fi
done
exit $status
