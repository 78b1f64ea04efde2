'use strict';
// Real processes: a SIGKILLed Node holder's seat comes back to a waiter in
// another Node process, and the C++ `shmsem` CLI and Node share one key's seats.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { uniqueKey, nextLine, spawnNode, exited } = require('./helpers');
const { SemaphoreService } = require('../lib');

test('the seat of a SIGKILLed Node process comes back to a waiter', async (t) => {
  const key = uniqueKey(t, 'kill');
  const child = spawnNode(`
    const sem = new SHMSEM.SemaphoreService();
    sem.acquire(${JSON.stringify(key)}, 1).then(() => { console.log('held'); setInterval(() => {}, 1000); });
  `);
  t.after(() => child.kill('SIGKILL'));
  assert.equal(await nextLine(child), 'held');
  const sem = new SemaphoreService();
  assert.equal(await sem.tryAcquire(key, 1), null);
  const waiting = sem.acquire(key, 1, { waitTimeout: 30000 });
  const killedAt = process.hrtime.bigint();
  child.kill('SIGKILL');
  const permit = await waiting;
  console.log(`seat back ${(Number(process.hrtime.bigint() - killedAt) / 1e6).toFixed(2)} ms after the kill`);
  assert.deepEqual(await exited(child), [null, 'SIGKILL']);
  assert.equal(await sem.usedPermits(key), 1);
  await permit.release();
});

test('the shmsem CLI (C++) and Node share the seats of one key', { skip: !process.env.SHMSEM_CLI && 'SHMSEM_CLI is not set (ctest sets it)' }, async (t) => {
  const key = uniqueKey(t, 'cli');
  const sem = new SemaphoreService();
  // The CLI holds one of two seats while its command waits on stdin.
  const cli = spawn(process.env.SHMSEM_CLI, ['run', key, '-p', '2', '--', 'sh', '-c', 'echo held; read line'],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => cli.kill('SIGKILL'));
  assert.equal(await nextLine(cli), 'held');
  assert.equal(await sem.usedPermits(key), 1);
  const mine = await sem.tryAcquire(key, 2);
  assert.ok(mine, 'the second seat is free');
  assert.equal(await sem.tryAcquire(key, 2), null);
  // Both seats held: a non-blocking CLI run cannot get one.
  const refused = spawn(process.env.SHMSEM_CLI, ['run', key, '--nonblock', '--', 'true'], { stdio: 'inherit' });
  assert.deepEqual(await exited(refused), [1, null]);
  // A Node waiter gets the CLI's seat when its command ends.
  const waiting = sem.acquire(key, 2, { waitTimeout: 30000 });
  cli.stdin.end('\n');
  assert.deepEqual(await exited(cli), [0, null]);
  const second = await waiting;
  assert.equal(await sem.usedPermits(key), 2);
  await second.release();
  await mine.release();
  assert.equal(await sem.usedPermits(key), 0);
});

test('a permit dropped without release gives its seat back when collected', async (t) => {
  const key = uniqueKey(t, 'gc');
  const child = spawn(process.execPath, ['--expose-gc', '-e', `
    const { SemaphoreService } = require(${JSON.stringify(require('node:path').join(__dirname, '..', 'lib'))});
    const sem = new SemaphoreService();
    (async () => {
      await sem.acquire(${JSON.stringify(key)}, 1);  // dropped at once
      const before = await sem.usedPermits(${JSON.stringify(key)});
      for (let i = 0; i < 20 && (await sem.usedPermits(${JSON.stringify(key)})) !== 0; i++) {
        global.gc();
        await new Promise((r) => setImmediate(r));
      }
      console.log(before, await sem.usedPermits(${JSON.stringify(key)}));
    })();
  `], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  assert.equal(await nextLine(child), '1 0');
  assert.deepEqual(await exited(child), [0, null]);
});

// Runs `body` (an async function body with sem, key and collect() in scope)
// in a child node with --expose-gc; resolves with the line it prints.
async function inCollectingChild(t, key, body) {
  const child = spawn(process.execPath, ['--expose-gc', '-e', `
    const { SemaphoreService } = require(${JSON.stringify(require('node:path').join(__dirname, '..', 'lib'))});
    const sem = new SemaphoreService();
    const key = ${JSON.stringify(key)};
    const turn = () => new Promise((r) => setImmediate(r));
    // Collects until used() is what it should be, or 20 rounds have passed.
    const collect = async (until) => {
      for (let i = 0; i < 20 && (await sem.usedPermits(key)) !== until; i++) {
        global.gc();
        await turn();
      }
    };
    (async () => { ${body} })().catch((e) => { console.log('error', e.message); });
  `], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  const line = await nextLine(child);
  assert.deepEqual(await exited(child), [0, null]);
  return line;
}

test('permits dropped by the hundred within one turn give their seats back when collected', async (t) => {
  const key = uniqueKey(t, 'gc-many');
  // More than the JavaScript layer lets wait unwatched within one turn.
  assert.equal(await inCollectingChild(t, key, `
    for (let i = 0; i < 1500; i++) await sem.acquire(key, 2000);  // each dropped at once
    const before = await sem.usedPermits(key);
    await collect(0);
    console.log(before, await sem.usedPermits(key));
  `), '1500 0');
});

test('a released permit, once collected, leaves the permit that reuses its slot held', async (t) => {
  const key = uniqueKey(t, 'gc-reuse');
  // The first permit lives across turns, so it is watched for collection;
  // released, its slot goes to the second, which must outlive its collection.
  assert.equal(await inCollectingChild(t, key, `
    let first = await sem.acquire(key, 2);
    await turn();
    await turn();
    await first.release();
    first = null;
    const second = await sem.acquire(key, 2);
    for (let i = 0; i < 10; i++) {
      global.gc();
      await turn();
    }
    const used = await sem.usedPermits(key);
    await second.release();
    console.log(used, await sem.usedPermits(key));
  `), '1 0');
});
