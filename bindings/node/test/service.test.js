'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { uniqueKey } = require('./helpers');
const shmsem = require('../lib');

const { SemaphoreService } = shmsem;

test('an uncontended acquire resolves and release frees the seat', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const before = Date.now();
  const p = await sem.acquire(key, 2, { ttl: 60000 });
  // To the kernel's tick, never after Date.now().
  assert.ok(p.acquiredAt <= Date.now() && p.acquiredAt > before - 1000, `${before} ${p.acquiredAt}`);
  assert.equal(p.key, key);
  assert.match(p.permitId, /^[1-9][0-9]*$/);
  assert.equal(p.ttl, 60000);
  assert.ok(p.expiresAt - p.acquiredAt === 60000);
  assert.equal(p.fencingToken, null);
  assert.equal(await sem.usedPermits(key), 1);
  assert.equal(await sem.availablePermits(key, 2), 1);
  assert.equal(await p.isHeld(), true);
  await p.release();
  await p.release(); // idempotent
  assert.equal(await p.isHeld(), false);
  assert.equal(await sem.usedPermits(key), 0);
});

test('each permit keeps its own id, read from the grant that made it', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService({ fencing: true });
  const first = await sem.acquire(key, 3);
  const second = await sem.tryAcquire(key, 3);
  const holder = await sem.acquire(key, 3);
  const waiting = sem.acquire(key, 3, { waitTimeout: 10000 }); // granted on the library's thread
  const ids = [first.permitId, second.permitId, holder.permitId];
  assert.equal(new Set(ids).size, 3);
  assert.ok(first.fencingToken < second.fencingToken && second.fencingToken < holder.fencingToken);
  await holder.release();
  const third = await waiting;
  assert.ok(!ids.includes(third.permitId));
  assert.ok(third.fencingToken > holder.fencingToken);
  await first.release();
  await second.release();
  await third.release();
  // Still readable once released: errors name it.
  assert.deepEqual([first.permitId, second.permitId, holder.permitId], ids);
  assert.equal(await sem.usedPermits(key), 0);
});

test('tryAcquire gives null when full, when the weight exceeds the capacity, never waits', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const a = await sem.tryAcquire(key, 2, { weight: 2 });
  assert.ok(a);
  assert.equal(a.weight, 2);
  assert.equal(await sem.tryAcquire(key, 2), null);
  await a.release();
  const b = await sem.tryAcquire(key, 2);
  assert.ok(b);
  await b.release();
});

test('usedPermits and forceReleaseAll of a key that has no semaphore are 0', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  assert.equal(await sem.usedPermits(key), 0);
  assert.equal(await sem.availablePermits(key, 3), 3);
  assert.equal(await sem.forceReleaseAll(key), 0);
});

test('forceReleaseAll displaces live holders; their release throws, extend throws', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const a = await sem.acquire(key, 3);
  const b = await sem.acquire(key, 3);
  assert.equal(await sem.forceReleaseAll(key), 2);
  assert.equal(await sem.usedPermits(key), 0);
  await assert.rejects(b.extend(1000), { code: 'SEMAPHORE_EXTENSION_FAILED', name: 'SemaphoreExtensionError' });
  await assert.rejects(a.release(), (e) => {
    assert.equal(e.code, 'SEMAPHORE_PERMIT_NOT_HELD');
    assert.ok(e instanceof shmsem.SemaphorePermitNotHeldError);
    assert.ok(e.message.includes(key), e.message);
    return true;
  });
  await a.release(); // idempotent after the throw
});

test('a lapsed TTL loses the seat: isHeld false, release throws', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const p = await sem.acquire(key, 1, { ttl: 30 });
  await new Promise((r) => setTimeout(r, 120)); // an upper bound past the TTL
  assert.equal(await p.isHeld(), false);
  await assert.rejects(p.release(), { code: 'SEMAPHORE_PERMIT_NOT_HELD' });
});

test('autoRenew keeps the seat past its TTL until stopAutoRenew', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  // Renewed every 500 ms: only a loop stalled for over a second loses it.
  const p = await sem.acquire(key, 1, { ttl: 1500, autoRenew: true });
  assert.equal(p.isAutoRenewing, true);
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal(await p.isHeld(), true);
  assert.ok(p.expiresAt > Date.now());
  p.stopAutoRenew();
  assert.equal(p.isAutoRenewing, false);
  await new Promise((r) => setTimeout(r, 1600));
  assert.equal(await p.isHeld(), false);
});

test('extend pushes the expiry forward', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const p = await sem.acquire(key, 1, { ttl: 5000 });
  await p.extend(60000);
  assert.equal(p.ttl, 60000);
  await new Promise((r) => setTimeout(r, 5100));
  assert.equal(await p.isHeld(), true);
  await p.release();
});

test('withPermit releases when fn throws, and logs (not throws) a lost seat', async (t) => {
  const key = uniqueKey(t);
  const warnings = [];
  const sem = new SemaphoreService({ logger: { warn: (m) => warnings.push(m) } });
  await assert.rejects(sem.withPermit(key, 1, () => { throw new Error('boom'); }), /boom/);
  assert.equal(await sem.usedPermits(key), 0);
  const v = await sem.withPermit(key, 1, async () => {
    await sem.forceReleaseAll(key);
    return 42;
  });
  assert.equal(v, 42);
  assert.equal(warnings.length, 1);
  assert.ok(warnings[0].includes(key), warnings[0]);
});

test('a waiting acquire times out with reason timeout', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1);
  await assert.rejects(sem.acquire(key, 1, { waitTimeout: 50 }), (e) => {
    assert.equal(e.code, 'SEMAPHORE_ACQUISITION_FAILED');
    assert.equal(e.reason, 'timeout');
    assert.equal(e.key, key);
    return true;
  });
  await held.release();
});

test('a weight above the capacity of an existing semaphore is exceeds_capacity', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const small = new SemaphoreService();
  (await small.acquire(key, 1)).release();
  await assert.rejects(sem.acquire(key, 5, { weight: 3 }), { reason: 'exceeds_capacity' });
});

test('an AbortSignal cancels a waiting acquire, and the seat is not taken', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1);
  const ac = new AbortController();
  const waiting = sem.acquire(key, 1, { signal: ac.signal });
  setTimeout(() => ac.abort(), 20);
  await assert.rejects(waiting, { code: 'SEMAPHORE_ACQUISITION_FAILED', reason: 'cancelled' });
  await assert.rejects(sem.acquire(key, 1, { signal: AbortSignal.abort() }), { reason: 'cancelled' });
  await held.release();
  assert.equal(await sem.usedPermits(key), 0);
  const next = await sem.tryAcquire(key, 1);
  assert.ok(next, 'the cancelled waiter left no seat held and no one queued');
  await next.release();
});

test('shutdown ends waiting acquires with reason shutdown and keeps held permits', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1, { ttl: 60000, autoRenew: true });
  const waiting = sem.acquire(key, 1);
  sem.shutdown();
  await assert.rejects(waiting, { reason: 'shutdown' });
  await assert.rejects(sem.acquire(key, 1), { reason: 'shutdown' });
  assert.equal(await sem.tryAcquire(key, 1), null);
  assert.equal(held.isAutoRenewing, false);
  assert.equal(await held.isHeld(), true);
  await held.release();
});

test('a seat granted as the service shuts down is given back', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const native = require('../lib/native');
  const probe = new native.Semaphore(key, 1, 0);
  t.after(() => probe.close());
  const held = await sem.acquire(key, 1);
  const waiting = sem.acquire(key, 1);
  await new Promise((r) => setImmediate(r));
  held.release();
  // Keep the loop busy until the library has granted the waiter its seat, so
  // that the grant reaches the loop only after the shutdown.
  const deadline = Date.now() + 10000;
  while (probe.used() !== 1 || probe.waiters() !== 0) {
    if (Date.now() > deadline) assert.fail('the waiter was not granted the seat');
  }
  sem.shutdown();
  await assert.rejects(waiting, { reason: 'shutdown' });
  assert.equal(probe.used(), 0);
});

test('fencing and fairness shape the semaphores the service creates', async (t) => {
  const key = uniqueKey(t);
  const barging = uniqueKey(t);
  const ordered = uniqueKey(t);
  const plain = uniqueKey(t);
  const native = require('../lib/native');
  const fenced = new SemaphoreService({ fencing: true });
  const a = await fenced.acquire(key, 2);
  const b = await fenced.acquire(key, 2);
  assert.equal(typeof a.fencingToken, 'bigint');
  assert.ok(b.fencingToken > a.fencingToken);
  await a.release();
  await b.release();
  await (await new SemaphoreService({ fairness: 'barging' }).acquire(barging, 1)).release();
  const probe = new native.Semaphore(barging, 1, 1);
  t.after(() => probe.close());
  assert.equal(probe.isBarging(), true);
  // fifo is asked for; without fairness, the default is barging.
  await (await new SemaphoreService({ fairness: 'fifo' }).acquire(ordered, 1)).release();
  await (await new SemaphoreService().acquire(plain, 1)).release();
  for (const [key_, barges] of [[ordered, false], [plain, true]]) {
    const made = new native.Semaphore(key_, 1, 1);
    t.after(() => made.close());
    assert.equal(made.isBarging(), barges, key_);
  }
  assert.throws(() => new SemaphoreService({ fairness: 'fair' }), TypeError);
  assert.throws(() => new SemaphoreService({ fencing: 'yes' }), TypeError);
});

test('an uncontended acquire completes at once, without a trip through the loop', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  let loopTurned = false;
  setImmediate(() => {
    loopTurned = true;
  });
  const p = await sem.acquire(key, 1);
  assert.equal(loopTurned, false, 'the grant waited for a turn of the event loop');
  await p.release();
});
