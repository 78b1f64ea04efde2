// tests/package/consumer/two_process.js: the Node consumer. It requires the
// installed package by name (no SHMSEM_NODE_ADDON, no path) and runs one
// semaphore across two processes:
//
//   parent: acquire(key, 1) ............ child: usedPermits == 1, tryAcquire is null
//   parent: release .................... child's waiting acquire wins
//   child:  release, exit 0;  parent: usedPermits == 0, remove(key)
//
// The child is this script again, in a fresh node; the processes talk over
// pipes, never by sleeping. Exit status 0 means every check held.
//
// usage: node two_process.js KEY
'use strict';
const { spawn } = require('node:child_process');
const readline = require('node:readline');
const shmsem = require('shmsem');

const CHILD = process.argv[2] === '--child';

function check(ok, what) {
  if (!ok) {
    console.error(`two_process.js ${CHILD ? 'child' : 'parent'}: FAILED: ${what}`);
    process.exit(1);
  }
}

function lines(stream) {
  const it = readline.createInterface({ input: stream })[Symbol.asyncIterator]();
  return async () => {
    const { value, done } = await it.next();
    return done ? null : value.trim();
  };
}

async function child(key) {
  const svc = new shmsem.SemaphoreService();
  check((await svc.usedPermits(key)) === 1, 'the parent\'s seat is not visible');
  check((await svc.tryAcquire(key, 1)) === null, 'tryAcquire won a seat the parent holds');
  process.stdout.write('F\n');
  check((await lines(process.stdin)()) === 'R', 'no word from the parent');
  const p = await svc.acquire(key, 1, { waitTimeout: 30000 });
  check((await svc.usedPermits(key)) === 1, 'usedPermits is not 1 while the child holds the seat');
  await p.release();
  svc.shutdown();
  process.exit(0);
}

async function parent(key) {
  const svc = new shmsem.SemaphoreService();
  const p = await svc.acquire(key, 1, { waitTimeout: 30000 });
  const c = spawn(process.execPath, [__filename, '--child', key], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => c.on('exit', (code) => resolve(code)));
  check((await lines(c.stdout)()) === 'F', 'the child did not find the semaphore full');
  await p.release();
  c.stdin.write('R\n');
  check((await exited) === 0, 'the child failed');
  check((await svc.usedPermits(key)) === 0, 'a seat is still used');
  svc.shutdown();
  check(shmsem.remove(key), 'remove found no semaphore');
  console.log(`two_process.js: ok (shmsem ${shmsem.version()} from ${require.resolve('shmsem')})`);
}

if (CHILD) child(process.argv[3]);
else if (process.argv.length === 3) parent(process.argv[2]);
else {
  console.error('usage: node two_process.js KEY');
  process.exit(2);
}
