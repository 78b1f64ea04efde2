#!/usr/bin/env bash
# ctest package.npm_pack: the npm tarball of bindings/node builds from source
# against an installed libshmsem-dev, offline. `cmake --install`s the build
# into a fresh prefix, runs `npm pack`, installs the tarball into an empty
# project with --offline and PKG_CONFIG_PATH at the prefix (its install
# script compiles the addon with the system's c++ and this node's headers;
# node-addon-api comes bundled), then runs a two-process acquire with the
# installed package: a child's tryAcquire fails while the parent holds the
# one seat, and its awaited acquire returns when the parent releases.
#
# usage: npm_pack_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1
work=$2
cmake=${CMAKE_COMMAND:-cmake}
die() {
  echo "npm_pack_test: FAILED: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work/app"
prefix=$work/prefix
# What libshmsem0 and libshmsem-dev hold: the library, headers, shmsem.pc.
for component in shmsem_runtime shmsem_development; do
  "$cmake" --install "$build" --prefix "$prefix" --component "$component" >>"$work/install.log" ||
    { cat "$work/install.log"; die "cmake --install --component $component failed"; }
done
pcdir=$(dirname "$(find "$prefix" -name shmsem.pc)")

(cd "$root/bindings/node" && npm pack --silent --pack-destination "$work") >"$work/pack.log" 2>&1 ||
  { cat "$work/pack.log"; die "npm pack failed"; }
tarball=$(ls "$work"/shmsem-*.tgz)
tar -tzf "$tarball" >"$work/contents"
grep -qx 'package/node_modules/node-addon-api/napi.h' "$work/contents" || die "node-addon-api is not bundled in $tarball"
! grep -q '^package/test/' "$work/contents" || die "$tarball carries the tests"

cd "$work/app"
# allowScripts: npm 11 runs a dependency's install script only when its
# project allows it (older npm ignores the field and runs it).
echo '{"name": "shmsem-npm-pack-test", "version": "1.0.0", "private": true, "allowScripts": {"shmsem": true}}' >package.json
env -u SHMSEM_NODE_ADDON PKG_CONFIG_PATH="$pcdir" npm install --offline --no-audit --no-fund \
  "$tarball" >"$work/npm-install.log" 2>&1 ||
  { cat "$work/npm-install.log"; die "npm install of the tarball failed"; }
[ -f node_modules/shmsem/build/Release/shmsem.node ] || { cat "$work/npm-install.log"; die "the install script built no addon"; }

cat >two_process.js <<'EOF'
'use strict';
// Parent: holds the one seat, forks the child. Child: tryAcquire must fail,
// then an awaited acquire returns once the parent releases.
const {fork} = require('node:child_process');
const shmsem = require('shmsem');
const key = process.argv[3] || `pkgtest.npm.${process.pid}`;
const svc = new shmsem.SemaphoreService();
async function child() {
  if (await svc.tryAcquire(key, 1) !== null) throw new Error('the child got a seat the parent holds');
  const got = svc.acquire(key, 1, {waitTimeout: 60_000});
  process.send('waiting');
  const p = await got;
  await p.release();
  process.send('acquired');
}
async function parent() {
  const held = await svc.acquire(key, 1);
  const c = fork(__filename, ['child', key]);
  const said = (what) => new Promise((resolve, reject) => {
    c.on('message', (m) => m === what && resolve());
    c.once('exit', (code) => reject(new Error(`child exited ${code} before '${what}'`)));
  });
  await said('waiting');
  const acquired = said('acquired');
  await held.release();
  await acquired;
  shmsem.remove(key);
  console.log('two-process acquire: ok');
}
(process.argv[2] === 'child' ? child() : parent()).then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
EOF
# The installed addon finds the prefix's library by its RUNPATH alone.
out=$(env -u SHMSEM_NODE_ADDON -u LD_LIBRARY_PATH timeout 120 node two_process.js 2>&1) || die "two-process acquire: $out"
echo "$out"
[ "$out" = "two-process acquire: ok" ] || die "two-process acquire printed '$out'"
