'use strict';
// @WithSemaphore on plain classes: keys, the onUnavailable policies, errors of
// the method, and the metadata of other decorators (reflect-metadata).
require('reflect-metadata');
const test = require('node:test');
const assert = require('node:assert/strict');
const { uniqueKey, decorate } = require('./helpers');
const shmsem = require('../lib');

const { WithSemaphore, SemaphoreService, setDefaultSemaphoreService } = shmsem;

// Each test's decorators use a fresh service, the one @WithSemaphore picks.
function freshService() {
  const sem = new SemaphoreService();
  setDefaultSemaphoreService(sem);
  return sem;
}

test('a {n} template names the key by the arguments; the seat is held while the method runs', async (t) => {
  const base = uniqueKey(t, 'tmpl');
  const sem = freshService();
  t.after(() => shmsem.remove(`${base}:acme`));
  class Exporter {
    async run(tenant) {
      return [this instanceof Exporter, await sem.usedPermits(`${base}:${tenant}`)];
    }
  }
  decorate(Exporter, 'run', [WithSemaphore({ key: `${base}:{0}`, permits: 1 })]);
  assert.deepEqual(await new Exporter().run('acme'), [true, 1]);
  assert.equal(await sem.usedPermits(`${base}:acme`), 0);
});

test('a key function gets the arguments', async (t) => {
  const key = uniqueKey(t, 'fn');
  const sem = freshService();
  class Job {
    async run(a, b) {
      return sem.usedPermits(key);
    }
  }
  const seen = [];
  decorate(Job, 'run', [WithSemaphore({ key: (a, b) => (seen.push([a, b]), key), permits: 2 })]);
  assert.equal(await new Job().run(1, 'two'), 1);
  assert.deepEqual(seen, [[1, 'two']]);
});

test("onUnavailable: 'throw' (default), 'skip', and a function mapping the error", async (t) => {
  const key = uniqueKey(t, 'policy');
  const sem = freshService();
  const held = await sem.acquire(key, 1);
  let ran = 0;
  class Job {
    async plain() { ran++; }
    async skip() { ran++; return 'ran'; }
    async mapped() { ran++; }
    async notAnError() { ran++; }
  }
  decorate(Job, 'plain', [WithSemaphore({ key, permits: 1, waitTimeout: 0 })]);
  decorate(Job, 'skip', [WithSemaphore({ key, permits: 1, waitTimeout: 10, onUnavailable: 'skip' })]);
  class Busy extends Error {}
  decorate(Job, 'mapped', [WithSemaphore({
    key, permits: 1, waitTimeout: 0, onUnavailable: (k, e) => Object.assign(new Busy(k), { reason: e.reason }),
  })]);
  decorate(Job, 'notAnError', [WithSemaphore({ key, permits: 1, waitTimeout: 0, onUnavailable: () => 'nope' })]);
  const job = new Job();
  await assert.rejects(job.plain(), { code: 'SEMAPHORE_ACQUISITION_FAILED', reason: 'timeout' });
  assert.equal(await job.skip(), undefined);
  await assert.rejects(job.mapped(), (e) => e instanceof Busy && e.message === key && e.reason === 'timeout');
  await assert.rejects(job.notAnError(), { code: 'SEMAPHORE_ACQUISITION_FAILED' });
  assert.equal(ran, 0);
  await held.release();
  assert.equal(await job.skip(), 'ran');
});

test('the policy covers acquisition only: the method\'s own errors propagate and the seat is released', async (t) => {
  const key = uniqueKey(t, 'body');
  const sem = freshService();
  const inner = uniqueKey(t, 'inner');
  const holder = await sem.acquire(inner, 1);
  class Job {
    async fail() { throw new Error('from the body'); }
    // An acquisition error raised inside the body is the body's error.
    async nested() { await sem.acquire(inner, 1, { waitTimeout: 0 }); }
  }
  decorate(Job, 'fail', [WithSemaphore({ key, permits: 1, onUnavailable: 'skip' })]);
  decorate(Job, 'nested', [WithSemaphore({ key, permits: 1, onUnavailable: 'skip' })]);
  await assert.rejects(new Job().fail(), /from the body/);
  await assert.rejects(new Job().nested(), { code: 'SEMAPHORE_ACQUISITION_FAILED' });
  assert.equal(await sem.usedPermits(key), 0);
  await holder.release();
});

test('errors are recognised by code: an acquisition error from another copy of the package still skips', async (t) => {
  const key = uniqueKey(t, 'copy');
  const sem = freshService();
  // A service whose acquire fails as a second copy's would: same code, another class.
  const foreign = Object.assign(new Error('from another copy'), { code: 'SEMAPHORE_ACQUISITION_FAILED', reason: 'timeout' });
  sem.acquire = async () => { throw foreign; };
  class Job { async run() { return 'ran'; } }
  decorate(Job, 'run', [WithSemaphore({ key, permits: 1, onUnavailable: 'skip' })]);
  assert.equal(await new Job().run(), undefined);
});

test('metadata stamped by decorators below is kept, and the name too', async (t) => {
  const key = uniqueKey(t, 'meta');
  freshService();
  const stamp = (k, v) => (target, name, d) => {
    Reflect.defineMetadata(k, v, d.value);
    return d;
  };
  class Job { async run() { return 1; } }
  decorate(Job, 'run', [stamp('above', 1), WithSemaphore({ key, permits: 1 }), stamp('below', 2)]);
  const fn = Job.prototype.run;
  assert.deepEqual(Reflect.getMetadataKeys(fn).sort(), ['above', 'below']);
  assert.equal(Reflect.getMetadata('below', fn), 2);
  assert.equal(fn.name, 'run');
  assert.equal(await new Job().run(), 1);
});

test('a bad decorator fails when the class is defined', () => {
  assert.throws(() => WithSemaphore(), TypeError);
  assert.throws(() => WithSemaphore({ key: 'k', permits: 1, ttl: -1 }), RangeError);
  assert.throws(() => WithSemaphore({ key: 'k', permits: 1 })({}, 'x', { value: 3 }), TypeError);
});
