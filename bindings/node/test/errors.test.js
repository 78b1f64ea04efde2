'use strict';
// Bad input gives typed errors, never a crash: wrong types, permits < 1, a bad
// key, a released permit used again, extend on a lost seat; and random values
// thrown at every entry point, the addon's included.
const test = require('node:test');
const assert = require('node:assert/strict');
const { uniqueKey } = require('./helpers');
const shmsem = require('../lib');
const native = require('../lib/native');

const { SemaphoreService, WithSemaphore } = shmsem;

test('wrong types are TypeErrors naming the argument', async () => {
  const sem = new SemaphoreService();
  await assert.rejects(sem.acquire(42, 1), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /key/ });
  await assert.rejects(sem.acquire('k', '1'), { name: 'TypeError', message: /permits/ });
  await assert.rejects(sem.acquire('k', 1, 'fast'), { name: 'TypeError', message: /options/ });
  await assert.rejects(sem.acquire('k', 1, { ttl: '1s' }), { name: 'TypeError', message: /options\.ttl/ });
  await assert.rejects(sem.acquire('k', 1, { signal: {} }), { name: 'TypeError', message: /AbortSignal/ });
  await assert.rejects(sem.withPermit('k', 1, 'not a function'), { name: 'TypeError', message: /fn/ });
  assert.throws(() => new SemaphoreService({ defaults: { autoRenew: 1 } }), { name: 'TypeError' });
  assert.throws(() => WithSemaphore({ key: 1, permits: 1 }), { name: 'TypeError', message: /options\.key/ });
  assert.throws(() => WithSemaphore({ key: 'k', permits: 1, onUnavailable: 'ignore' }), { name: 'TypeError' });
});

test('permits < 1 and other values out of range are RangeErrors', async () => {
  const sem = new SemaphoreService();
  for (const permits of [0, -1, 1.5, NaN, Infinity, 1e7]) {
    await assert.rejects(sem.acquire('k', permits), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
  }
  await assert.rejects(sem.acquire('k', 2, { weight: 3 }), { name: 'RangeError', message: /weight/ });
  await assert.rejects(sem.acquire('k', 2, { waitTimeout: -5 }), { name: 'RangeError' });
  await assert.rejects(sem.acquire('', 2), { name: 'RangeError', message: /key/ });
  assert.throws(() => WithSemaphore({ key: 'k', permits: 0 }), { name: 'RangeError' });
});

test('a bad key is a ShmsemError SHMSEM_EINVAL naming the key', async () => {
  const sem = new SemaphoreService();
  const key = 'x'.repeat(300);
  await assert.rejects(sem.acquire(key, 1), (e) => {
    assert.equal(e.name, 'ShmsemError');
    assert.equal(e.code, 'SHMSEM_EINVAL');
    assert.ok(e.message.includes('xxxxxxxx'), e.message);
    return true;
  });
  await assert.rejects(sem.acquire('a\0b', 1), { code: 'SHMSEM_EINVAL' });
  await assert.rejects(sem.tryAcquire(key, 1), { code: 'SHMSEM_EINVAL' });
  await assert.rejects(sem.usedPermits(key), { code: 'SHMSEM_EINVAL' });
  assert.throws(() => shmsem.remove(key), { code: 'SHMSEM_EINVAL' });
});

test('a released permit used again: release is a no-op, extend throws, isHeld is false', async (t) => {
  const key = uniqueKey(t);
  const sem = new SemaphoreService();
  const p = await sem.acquire(key, 1);
  await p.release();
  await p.release();
  await assert.rejects(p.extend(1000), { code: 'SEMAPHORE_EXTENSION_FAILED', message: /released/ });
  await assert.rejects(p.extend(0), { name: 'RangeError' });
  assert.equal(await p.isHeld(), false);
});

test('a Permit is made by the service only', () => {
  assert.throws(() => new shmsem.Permit(), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => new shmsem.Permit({}, {}, 'k', 0), TypeError);
});

test('the addon checks its own arguments', () => {
  assert.throws(() => new native.Semaphore(), TypeError);
  assert.throws(() => new native.Semaphore('k', 0, 0), RangeError);
  assert.throws(() => new native.Semaphore('k', 1, -1), RangeError);
  // A permit's handle that names no permit (never given, or released) is
  // refused, never followed.
  for (const handle of [0, 2 ** 21, 2 ** 21 + 7, 2 ** 53, -1, 0.5, NaN]) {
    assert.throws(() => native.release(handle), { shmsemCode: -3 });
    assert.throws(() => native.extend(handle, 10), { shmsemCode: -3 });
    assert.throws(() => native.describe(handle), { shmsemCode: -3 });
    assert.equal(native.isHeld(handle), false);
    native.dropped(handle);
  }
  assert.throws(() => native.release('1'), TypeError);
  assert.throws(() => native.isHeld(), TypeError);
});

test('a released handle names nothing, even once its slot is reused', async (t) => {
  const key = uniqueKey(t);
  const s = new native.Semaphore(key, 2, 0);
  t.after(() => {
    s.close();
    shmsem.remove(key);
  });
  const first = s.tryAcquire(1, 0);
  native.release(first);
  const second = s.tryAcquire(1, 0);  // the same slot, the next generation
  assert.notEqual(second, first);
  assert.throws(() => native.release(first), { shmsemCode: -3 });
  native.dropped(first);
  assert.equal(native.isHeld(second), true);
  assert.equal(s.used(), 1);
  native.release(second);
  assert.equal(s.used(), 0);
});

test('a closed native handle refuses every call', async (t) => {
  const key = uniqueKey(t);
  const s = new native.Semaphore(key, 1, 0);
  const id = s.handle();
  s.close();
  s.close();
  assert.throws(() => native.tryAcquire(id, 1, 0), { shmsemCode: -4 });
  assert.throws(() => native.tryAcquire(2 ** 53, 1, 0), { shmsemCode: -4 });
  assert.throws(() => native.tryAcquire('1', 1, 0), TypeError);
  assert.throws(() => s.used(), { shmsemCode: -4 });
  assert.throws(() => s.acquire(1, -1, 0, null), { shmsemCode: -4 });
  assert.throws(() => s.tryAcquire(1, 0), { shmsemCode: -4 });
});

// Random values of every JS type, at every argument position.
// Strings are this test's key or grow from it, so that every segment the
// fuzz creates is one it removes.
const fuzzKeys = new Set();
function fuzzKey(s) {
  fuzzKeys.add(s);
  return s;
}

function randomValue(rng, key) {
  const pick = [
    () => undefined, () => null, () => true, () => 0, () => -1, () => 1, () => 2 ** 31, () => 2 ** 53,
    () => NaN, () => Infinity, () => -Infinity, () => -0, () => 0.5, () => rng() * 1e12 - 5e11,
    () => '', () => key, () => fuzzKey(key + 'x'.repeat(Math.floor(rng() * 300))), () => 'a\0b',
    () => fuzzKey(key + '\u{1F600}'),
    () => 10n, () => Symbol('s'), () => ({}), () => [], () => () => 1, () => new Date(),
    () => ({ ttl: randomScalar(rng), waitTimeout: randomScalar(rng), weight: randomScalar(rng) }),
    () => new native.CancelToken(), () => 2 ** 21 + Math.floor(rng() * 4),
  ];
  return pick[Math.floor(rng() * pick.length)]();
}

function randomScalar(rng) {
  const v = [undefined, null, -1, 0, 1, 1.5, NaN, '1', 1e10, true][Math.floor(rng() * 10)];
  return v;
}

function seeded(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const ALLOWED = new Set(['TypeError', 'RangeError', 'ShmsemError', 'SemaphoreAcquisitionError',
  'SemaphorePermitNotHeldError', 'SemaphoreExtensionError']);

test('fuzz: random arguments only ever give typed errors', async (t) => {
  const key = uniqueKey(t, 'fuzz');
  const rng = seeded(Number(process.env.SHMSEM_FUZZ_SEED || 12345));
  const sem = new SemaphoreService();
  const base = await sem.acquire(key, 4);
  const handle = new native.Semaphore(key, 4, 0);
  t.after(() => {
    handle.close();
    for (const k of fuzzKeys) {
      try {
        shmsem.remove(k);
      } catch {
        // not a valid key: nothing was created
      }
    }
  });
  const calls = [
    (a) => sem.acquire(a[0], a[1], a[2]),
    (a) => sem.acquire(key, 4, a[0]),
    (a) => sem.acquire(key, a[0], { waitTimeout: 0, weight: a[1] }),
    (a) => sem.tryAcquire(a[0], a[1], a[2]),
    (a) => sem.tryAcquire(key, 4, { weight: a[0], ttl: a[1] }),
    (a) => sem.withPermit(a[0], a[1], a[2], a[3]),
    (a) => sem.usedPermits(a[0]),
    (a) => sem.availablePermits(a[0], a[1]),
    (a) => base.extend(a[0]),
    (a) => new SemaphoreService(a[0]),
    (a) => WithSemaphore(a[0]),
    (a) => WithSemaphore({ key: a[0], permits: a[1], ttl: a[2], onUnavailable: a[3] }),
    (a) => shmsem.remove(a[0]),
    (a) => new native.Semaphore(a[0], a[1], a[2]),
    (a) => handle.acquire(a[0], a[1], a[2], a[3]).then(giveBack),
    (a) => giveBack(handle.tryAcquire(a[0], a[1])),
    (a) => giveBack(native.tryAcquire(handle.handle(), a[0], a[1])),
    (a) => giveBack(native.tryAcquire(a[0], a[1], a[2])),
    (a) => native.extend(a[0], a[1]),
    (a) => native.isHeld(a[0]),
    (a) => native.describe(a[0]),
    (a) => native.remove(a[0]),
    (a) => new shmsem.Permit(a[0], a[1], a[2], a[3]),
  ];
  // The addon hands a grant over as a number, its handle: it goes back at once.
  const giveBack = (h) => {
    if (h !== null) native.release(h);
  };
  let typed = 0;
  for (let i = 0; i < 3000; i++) {
    const fn = calls[Math.floor(rng() * calls.length)];
    const a = [randomValue(rng, key), randomValue(rng, key), randomValue(rng, key), randomValue(rng, key)];
    let result;
    try {
      result = await fn(a);
    } catch (e) {
      const name = e && (e.name || (e.constructor && e.constructor.name));
      if (typeof e.shmsemCode === 'number' || ALLOWED.has(name)) {
        typed++;
        continue;
      }
      assert.fail(`call ${calls.indexOf(fn)} with ${a.map(String)} threw ${name}: ${e && e.message}`);
    }
    // A permit the random call happened to take goes back at once.
    if (result && typeof result.release === 'function') {
      try {
        const r = result.release();
        if (r && typeof r.then === 'function') await r;
      } catch {
        // released or lost already
      }
    }
  }
  assert.ok(typed > 1000, `only ${typed} calls failed: the fuzz does not reach the checks`);
  // The fuzz may have shortened base's TTL with extend(): it may be lost now.
  await base.release().catch((e) => assert.equal(e.code, 'SEMAPHORE_PERMIT_NOT_HELD'));
  assert.equal(await sem.usedPermits(key), 0);
});
