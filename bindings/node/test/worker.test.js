'use strict';
// Worker threads: each has its own instance of the addon. A worker ended while
// its acquires wait must not bring the process down (Node frees the worker's
// threadsafe functions while the library's threads may still call them), and
// its requests must not keep seats.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { uniqueKey } = require('./helpers');
const { SemaphoreService } = require('../lib');

const PACKAGE = path.join(__dirname, '..', 'lib');

test('workers terminated while their acquires wait leave no seat held', async (t) => {
  const key = uniqueKey(t, 'worker');
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1);
  for (let round = 0; round < 20; round++) {
    const worker = new Worker(`
      const { parentPort } = require('node:worker_threads');
      const { SemaphoreService } = require(${JSON.stringify(PACKAGE)});
      const sem = new SemaphoreService();
      for (let i = 0; i < 20; i++) sem.acquire(${JSON.stringify(key)}, 1).catch(() => {});
      parentPort.postMessage('waiting');
    `, { eval: true });
    assert.equal(await new Promise((resolve) => worker.once('message', resolve)), 'waiting');
    await worker.terminate();
  }
  assert.equal(await sem.usedPermits(key), 1);
  await held.release();
  // The ended workers' requests are gone from the queue: the seat is free.
  const next = await sem.acquire(key, 1, { waitTimeout: 10000 });
  await next.release();
  assert.equal(await sem.usedPermits(key), 0);
});

test('a worker acquires, waits and is woken like the main thread', async (t) => {
  const key = uniqueKey(t, 'worker-wake');
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1);
  const worker = new Worker(`
    const { parentPort } = require('node:worker_threads');
    const { SemaphoreService } = require(${JSON.stringify(PACKAGE)});
    const sem = new SemaphoreService();
    sem.acquire(${JSON.stringify(key)}, 1).then(async (p) => { await p.release(); parentPort.postMessage('granted'); });
    parentPort.postMessage('waiting');
  `, { eval: true });
  const messages = [];
  const granted = new Promise((resolve) => worker.on('message', (m) => {
    messages.push(m);
    if (m === 'granted') resolve();
  }));
  await new Promise((resolve) => worker.once('message', resolve));
  await held.release();
  await granted;
  assert.deepEqual(messages, ['waiting', 'granted']);
  await worker.terminate();
});
