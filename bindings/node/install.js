#!/usr/bin/env node
// The package's install script (`npm install shmsem`): compiles
// src/addon.cpp into build/Release/shmsem.node with the system's C++
// compiler, against
//   - the headers of the node that runs this script: <prefix>/include/node,
//     where nodejs (nodesource) and Debian's libnode-dev put them; the
//     environment variable SHMSEM_NODE_INCLUDE_DIR overrides it;
//   - node-addon-api, bundled in the tarball (bundleDependencies);
//   - an installed libshmsem-dev, found with pkg-config (`shmsem`;
//     PKG_CONFIG_PATH finds one installed under another prefix).
// node-gyp is not used: it would download node's headers. Nothing here
// touches the network.
'use strict';
const {execFileSync} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

// In the source repository (npm ci of bindings/node), the project's CMake
// builds the addon; the tarball has no CMakeLists.txt.
if (fs.existsSync(path.join(__dirname, 'CMakeLists.txt'))) process.exit(0);

function fail(msg) {
  process.stderr.write(`shmsem: cannot build the addon: ${msg}\n`);
  process.exit(1);
}

function pkgConfig(...args) {
  try {
    return execFileSync('pkg-config', [...args, 'shmsem'], {encoding: 'utf8'}).trim();
  } catch (e) {
    fail(`pkg-config does not find shmsem (install libshmsem-dev, or set PKG_CONFIG_PATH ` +
         `to the folder of an installed shmsem.pc): ${e.message}`);
  }
}

const nodeInclude = process.env.SHMSEM_NODE_INCLUDE_DIR ||
    path.join(path.dirname(process.execPath), '..', 'include', 'node');
if (!fs.existsSync(path.join(nodeInclude, 'node_api.h')))
  fail(`${nodeInclude}/node_api.h is missing (install the headers of this node: nodejs from ` +
       'nodesource has them, Debian\'s are in libnode-dev; or set SHMSEM_NODE_INCLUDE_DIR)');
let addonApi;
try {
  addonApi = path.dirname(require.resolve('node-addon-api/napi.h'));
} catch (e) {
  fail(`node-addon-api is missing: ${e.message}`);
}

const libdir = pkgConfig('--variable=libdir');
const out = path.join(__dirname, 'build', 'Release', 'shmsem.node');
fs.mkdirSync(path.dirname(out), {recursive: true});
const args = [
  '-std=c++20', '-O2', '-fPIC', '-shared', '-fvisibility=hidden',
  // As the project's CMake builds it: N-API 8 loads into any Node from 12.22.
  '-DNAPI_VERSION=8', '-DNAPI_CPP_EXCEPTIONS', '-DNODE_ADDON_API_DISABLE_DEPRECATED',
  '-DBUILDING_NODE_EXTENSION',
  '-isystem', nodeInclude, '-isystem', addonApi,
  ...pkgConfig('--cflags').split(/\s+/).filter(Boolean),
  path.join(__dirname, 'src', 'addon.cpp'),
  '-o', out,
  ...pkgConfig('--libs').split(/\s+/).filter(Boolean),
  // The library where pkg-config found it, also when that is not on the
  // loader's path; node_api.h's symbols come from the node that loads it.
  `-Wl,-rpath,${libdir}`, '-Wl,--unresolved-symbols=ignore-all',
];
const cxx = process.env.CXX || 'c++';
try {
  execFileSync(cxx, args, {stdio: 'inherit'});
} catch (e) {
  fail(`${cxx} failed (${e.message})`);
}
