#!/usr/bin/env bash
# clang-format over the project's C++ files: "check" fails on any difference, "fix" rewrites.
set -euo pipefail
cd "$(dirname "$0")/.."
# No file list is a failure: a check that looked at nothing passes nothing.
if ! list=$(git ls-files '*.cpp' '*.hpp' '*.h'); then
  echo "format: git ls-files failed; run this from a git checkout of shmsem" >&2
  exit 1
fi
if [ -z "$list" ]; then
  echo "format: git ls-files lists no C++ files" >&2
  exit 1
fi
mapfile -t files <<<"$list"
if [ "${1:-check}" = fix ]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run -Werror "${files[@]}"
fi
