'use strict';
// ShmsemModule in real NestJS (@nestjs/core, @nestjs/testing), and
// @WithSemaphore beside the real @Cron() of @nestjs/schedule.
require('reflect-metadata');
const test = require('node:test');
const assert = require('node:assert/strict');
const { Injectable, Inject } = require('@nestjs/common');
const { Test } = require('@nestjs/testing');
const { ScheduleModule, SchedulerRegistry, Cron } = require('@nestjs/schedule');
const { uniqueKey, decorate } = require('./helpers');
const { ShmsemModule, SEMAPHORE_SERVICE, SemaphoreService, WithSemaphore, getDefaultSemaphoreService } = require('../lib');

async function app(imports, providers) {
  const moduleRef = await Test.createTestingModule({ imports, providers }).compile();
  await moduleRef.init();
  return moduleRef;
}

test('forRoot provides SEMAPHORE_SERVICE with its defaults, for injection and for @WithSemaphore', async (t) => {
  const key = uniqueKey(t, 'nest');
  class Reports {
    constructor(semaphore) { this.semaphore = semaphore; }
    async fetch() { return this.semaphore.withPermit(key, 5, async () => this.semaphore.usedPermits(key)); }
  }
  Injectable()(Reports);
  Inject(SEMAPHORE_SERVICE)(Reports, undefined, 0);
  const ref = await app([ShmsemModule.forRoot({ defaults: { ttl: 60000 } })], [Reports]);
  t.after(() => ref.close());
  const sem = ref.get(SEMAPHORE_SERVICE);
  assert.ok(sem instanceof SemaphoreService);
  assert.equal(sem.defaults.ttl, 60000);
  assert.equal(getDefaultSemaphoreService(), sem);
  assert.equal(await ref.get(Reports).fetch(), 1);
  const p = await sem.acquire(key, 5);
  assert.equal(p.ttl, 60000);
  await p.release();
});

test('app.close(): held permits stay held and stop renewing, waiters end with shutdown, a seat won then goes back', async (t) => {
  const key = uniqueKey(t, 'close');
  const handover = uniqueKey(t, 'handover');
  const ref = await app([ShmsemModule.forRoot()], []);
  const sem = ref.get(SEMAPHORE_SERVICE);
  const held = await sem.acquire(key, 1, { ttl: 60000, autoRenew: true });
  const waiting = sem.acquire(key, 1);
  const other = await sem.acquire(handover, 1);
  const winner = sem.acquire(handover, 1);
  // The grant lands as the application closes: it must not stay held.
  await other.release();
  await ref.close();
  await assert.rejects(waiting, { code: 'SEMAPHORE_ACQUISITION_FAILED', reason: 'shutdown' });
  await assert.rejects(winner, { reason: 'shutdown' });
  assert.equal(await sem.usedPermits(handover), 0);
  assert.equal(held.isAutoRenewing, false);
  assert.equal(await held.isHeld(), true);
  assert.equal(await sem.usedPermits(key), 1);
  await assert.rejects(sem.acquire(key, 1), { reason: 'shutdown' });
  // Work that finishes after the close still releases through its own finally.
  await held.release();
  assert.equal(await new SemaphoreService().usedPermits(key), 0);
});

test('@Cron() above or below @WithSemaphore keeps its job, and the job runs holding the seat', async (t) => {
  const key = uniqueKey(t, 'cron');
  let resolveRan;
  const ran = new Promise((r) => { resolveRan = r; });
  class Sync {
    constructor(semaphore) { this.semaphore = semaphore; }
    async above() {}
    async below() { resolveRan(await this.semaphore.usedPermits(key)); }
  }
  Injectable()(Sync);
  Inject(SEMAPHORE_SERVICE)(Sync, undefined, 0);
  decorate(Sync, 'above', [Cron('0 0 1 1 *', { name: 'above' }), WithSemaphore({ key, permits: 1, onUnavailable: 'skip' })]);
  decorate(Sync, 'below', [WithSemaphore({ key, permits: 1, onUnavailable: 'skip' }), Cron('* * * * * *', { name: 'below' })]);
  const ref = await app([ScheduleModule.forRoot(), ShmsemModule.forRoot()], [Sync]);
  t.after(() => ref.close());
  const registry = ref.get(SchedulerRegistry);
  assert.deepEqual([...registry.getCronJobs().keys()].sort(), ['above', 'below']);
  // Every second; 20 s is an upper bound for a loaded machine.
  const used = await Promise.race([ran, new Promise((_, reject) => setTimeout(() => reject(new Error('the job did not run')), 20000).unref())]);
  assert.equal(used, 1);
});
