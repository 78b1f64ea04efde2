'use strict';
// The package as npm and ES modules see it: named exports, and its version.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

test('every exported name of the types is a named ESM export', async () => {
  const esm = await import(pathToFileURL(path.join(__dirname, '..', 'lib', 'index.js')).href);
  const dts = fs.readFileSync(path.join(__dirname, '..', 'lib', 'index.d.ts'), 'utf8');
  const values = [...dts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]);
  assert.ok(values.length >= 12, `only ${values.length} names found in index.d.ts`);
  for (const name of values) assert.notEqual(esm[name], undefined, `${name} is not a named export`);
  assert.match(esm.version(), /^\d+\.\d+\.\d+$/);
});

test('the package version is the library version', () => {
  const pkg = require('../package.json');
  const lock = require('../package-lock.json');
  const native = require('../lib/native');
  assert.equal(pkg.version, native.version());
  assert.equal(lock.version, pkg.version);
});
