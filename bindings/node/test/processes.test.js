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
