'use strict';
// Loads the addon: SHMSEM_NODE_ADDON names it (the project's ctest sets it),
// else the build tree of this repository (build/bindings/node/shmsem.node),
// else node-gyp's build/Release/ beside the package.
const path = require('node:path');

const candidates = [
  process.env.SHMSEM_NODE_ADDON,
  path.join(__dirname, '..', 'build', 'Release', 'shmsem.node'),
  path.join(__dirname, '..', '..', '..', 'build', 'bindings', 'node', 'shmsem.node'),
].filter(Boolean);

function load() {
  const tried = [];
  for (const file of candidates) {
    try {
      return require(file);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
      tried.push(file);
    }
  }
  const e = new Error(`shmsem: the native addon was not found (tried ${tried.join(', ')}); ` +
    'build it with the project\'s CMake or set SHMSEM_NODE_ADDON');
  e.code = 'MODULE_NOT_FOUND';
  throw e;
}

module.exports = load();
