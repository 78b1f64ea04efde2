'use strict';
// Shared by the test files: unique keys (pid + counter) removed after the
// test, a child process's first line, and TypeScript-style decoration.
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const shmsem = require('../lib');

const PACKAGE = path.join(__dirname, '..', 'lib');
let counter = 0;

/** A key no other test uses, removed when the test ends. */
function uniqueKey(t, label = 'node') {
  const key = `shmsem-test-${label}-${process.pid}-${++counter}`;
  t.after(() => shmsem.remove(key));
  return key;
}

/** Resolves with the child's next line on stdout (rejects if it exits first). */
function nextLine(child) {
  if (!child.lines) {
    child.lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  }
  return child.lines.next().then((r) => {
    if (r.done) throw new Error('child exited before writing a line');
    return r.value;
  });
}

/** Runs a Node script that can require('shmsem') as SHMSEM. */
function spawnNode(source) {
  const child = spawn(process.execPath, ['-e', `const SHMSEM = require(${JSON.stringify(PACKAGE)});\n${source}`],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  return child;
}

function exited(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve([child.exitCode, child.signalCode]);
    else child.once('exit', (code, signal) => resolve([code, signal]));
  });
}

/** Applies method decorators as TypeScript does: listed top to bottom, applied bottom up. */
function decorate(cls, name, decorators) {
  let d = Object.getOwnPropertyDescriptor(cls.prototype, name);
  for (const dec of [...decorators].reverse()) d = dec(cls.prototype, name, d) || d;
  Object.defineProperty(cls.prototype, name, d);
}

module.exports = { uniqueKey, nextLine, spawnNode, exited, decorate };
