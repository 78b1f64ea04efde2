'use strict';
// Waiting acquires wait on the library's threads, not on the libuv pool: with
// 200 of them waiting, fs calls (which run on the 4-thread pool) still complete
// and timers still tick.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { uniqueKey } = require('./helpers');
const { SemaphoreService } = require('../lib');

test('200 waiting acquires block neither the libuv pool nor the loop', async (t) => {
  const key = uniqueKey(t, 'loop');
  const sem = new SemaphoreService();
  // The pool starts its threads at first use: not a cost of the waiters.
  await fs.promises.readFile(__filename);
  const held = await sem.acquire(key, 1);
  const waiting = [];
  for (let i = 0; i < 200; i++) waiting.push(sem.acquire(key, 1));

  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  try {
    const slowest = [];
    for (let i = 0; i < 5; i++) {
      const start = process.hrtime.bigint();
      await fs.promises.readFile(__filename);
      slowest.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    const worst = Math.max(...slowest);
    console.log(`readFile with 200 waiters: ${slowest.map((ms) => ms.toFixed(2)).join(', ')} ms`);
    assert.ok(worst < 100, `readFile took ${worst} ms`);
    const before = ticks;
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(ticks - before >= 5, `setInterval ticked ${ticks - before} times in 200 ms`);
  } finally {
    clearInterval(timer);
  }

  // Hand the seat down the line: every waiter gets it in turn.
  let granted = 0;
  await held.release();
  await Promise.all(waiting.map(async (p) => {
    const permit = await p;
    granted++;
    await permit.release();
  }));
  assert.equal(granted, 200);
  assert.equal(await sem.usedPermits(key), 0);
});
