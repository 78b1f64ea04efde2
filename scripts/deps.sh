#!/usr/bin/env bash
# Installs the Debian 12 packages a Makefile target needs, and no more:
#   scripts/deps.sh demo    build the library, the tools and the Python module,
#                           run the demo (`make demo`, `make build`)
#   scripts/deps.sh bench   demo + the benchmarks' peers (`make bench`), with
#                           the npm peer's node_modules (npm ci in bench/node)
#   scripts/deps.sh deb     demo + the Debian packaging and the suite the
#                           package build runs (`make deb`), with node and
#                           the Node package's npm dependencies (node-shmsem)
#   scripts/deps.sh test    everything `make test` runs: the suite, sanitizers,
#                           static checks, fuzzers, the package tests, the
#                           npm peer that bench.smoke runs, and the Node
#                           package's npm dependencies (npm ci in
#                           bindings/node) (default)
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail
set_name=${1:-test}

# Configuring the default build (library, tools, Python module) needs these.
demo=(
  g++ cmake make pkg-config
  libboost-dev libspdlog-dev libfmt-dev libhiredis-dev
  libcli11-dev nlohmann-json3-dev libncurses-dev
  python3-dev pybind11-dev
)
# The test suite: GoogleTest, the real redis-server, tmux for semtop's
# screen, strace, valgrind (shmsem run under it), promtool, man, pytest and
# gunicorn; GNU parallel for the `sem` peer of the command-line bench row
# (run by bench.smoke).
suite=(
  libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools
  tmux util-linux procps man-db strace valgrind parallel
  prometheus
  python3-pytest python3-mypy gunicorn
)
# build-essential: dpkg-buildpackage requires it (an implicit Build-Depends),
# and a minimal Debian has g++ without it.
packaging=(build-essential debhelper dpkg-dev fakeroot lintian dh-python)
# Static checks and fuzzers.
checks=(clang-14 libfuzzer-14-dev libclang-rt-14-dev clang-format clang-tidy cppcheck)

case $set_name in
  demo) pkgs=("${demo[@]}") ;;
  bench) pkgs=("${demo[@]}" libbenchmark-dev redis-server util-linux parallel) ;;
  deb) pkgs=("${demo[@]}" "${suite[@]}" "${packaging[@]}") ;;
  test) pkgs=("${demo[@]}" "${suite[@]}" "${packaging[@]}" "${checks[@]}") ;;
  *)
    echo "usage: scripts/deps.sh demo|bench|deb|test" >&2
    exit 2
    ;;
esac

# node and npm: the Redis table's peer, the npm package redis-semaphore,
# runs under node (bench/node, pinned by its package-lock.json), and the
# Node package (bindings/node, packaged as node-shmsem) builds with npm's
# node-addon-api and is tested under node. Debian's nodejs and npm only
# where there is none: a node that bundles its own npm conflicts with
# Debian's npm package.
node_peer=0
case $set_name in bench | test) node_peer=1 ;; esac
node_package=0
case $set_name in deb | test) node_package=1 ;; esac
if [ $node_peer -eq 1 ] || [ $node_package -eq 1 ]; then
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
fi
# The Node package's addon (bindings/node) builds against node_api.h:
# nodesource's nodejs ships it, Debian's comes with libnode-dev.
if [ $node_package -eq 1 ] && [ ! -f /usr/include/node/node_api.h ]; then
  pkgs+=(libnode-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "deps ($set_name): installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "deps ($set_name): missing Debian packages. Run as root:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# Never at build time: the build downloads nothing.
root="$(cd "$(dirname "$0")/.." && pwd)"
# npm ci starts from an empty node_modules: only when the lock file is newer
# than what is installed. Returns npm's status.
npm_ci() {
  local installed="$1/node_modules/.package-lock.json"
  if [ -f "$installed" ] && [ ! "$1/package-lock.json" -nt "$installed" ]; then
    return 0
  fi
  (cd "$1" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
}
# Without the packages the bench's peer row says "not installed" instead of
# a figure.
if [ $node_peer -eq 1 ] && ! npm_ci "$root/bench/node"; then
  echo "deps ($set_name): warning: npm ci in $root/bench/node failed; the redis-semaphore" \
    "row of make bench will say it is not installed" >&2
fi
# The Node package's node-addon-api (header-only) and the NestJS packages its
# tests run against; without them CMake leaves the Node package out.
if [ $node_package -eq 1 ] && ! npm_ci "$root/bindings/node"; then
  echo "deps ($set_name): npm ci in $root/bindings/node failed" >&2
  exit 1
fi
