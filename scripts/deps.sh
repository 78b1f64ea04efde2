#!/usr/bin/env bash
# Installs the Debian 12 packages shmsem needs to build, test and package.
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail
pkgs=(
  g++ cmake make pkg-config
  libboost-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libncurses-dev
  libhiredis-dev redis-server redis-tools
  clang-14 libfuzzer-14-dev libclang-rt-14-dev clang-format clang-tidy cppcheck
  tmux util-linux procps man-db strace
  debhelper dpkg-dev fakeroot lintian
  prometheus
  python3-dev pybind11-dev python3-pytest gunicorn dh-python
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: missing Debian packages. Run as root:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
