'use strict';
// A redis+unix:// key gives the same API over a private redis-server that
// this test starts (no port to collide on) and stops.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const shmsem = require('../lib');

const { SemaphoreService } = shmsem;

let socket;
let server;
let folder;
let counter = 0;

test.before(async () => {
  folder = fs.mkdtempSync(path.join(os.tmpdir(), 'shmsem-node-redis.'));
  socket = path.join(folder, 'redis.sock');
  server = spawn('redis-server', ['--port', '0', '--unixsocket', socket, '--unixsocketperm', '700',
    '--dir', folder, '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'inherit'] });
  // The server says when it listens; 20 s is an upper bound.
  const lines = readline.createInterface({ input: server.stdout });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('redis-server did not start')), 20000);
    server.once('exit', (code) => reject(new Error(`redis-server exited with ${code}`)));
    lines.on('line', (line) => {
      if (/ready to accept connections/i.test(line)) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  server.stdout.resume();
});

test.after(() => {
  if (server) server.kill('SIGKILL');
  if (folder) fs.rmSync(folder, { recursive: true, force: true });
});

function url(t) {
  const u = `redis+unix://${socket}?key=node-test-${process.pid}-${++counter}`;
  t.after(() => shmsem.remove(u));
  return u;
}

test('acquire, tryAcquire, figures and release on a Redis key', async (t) => {
  const key = url(t);
  const sem = new SemaphoreService();
  const a = await sem.acquire(key, 2, { ttl: 60000 });
  assert.equal(typeof a.fencingToken, 'bigint');
  const b = await sem.tryAcquire(key, 2);
  assert.ok(b);
  assert.ok(b.fencingToken > a.fencingToken);
  assert.equal(await sem.tryAcquire(key, 2), null);
  assert.equal(await sem.usedPermits(key), 2);
  assert.equal(await sem.availablePermits(key, 2), 0);
  await a.release();
  await b.release();
  assert.equal(await sem.usedPermits(key), 0);
});

test('a waiter on a Redis key is woken by a release, and forceReleaseAll displaces', async (t) => {
  const key = url(t);
  const sem = new SemaphoreService();
  const held = await sem.acquire(key, 1);
  const waiting = sem.acquire(key, 1, { waitTimeout: 30000 });
  await held.release();
  const next = await waiting;
  assert.equal(await sem.forceReleaseAll(key), 1);
  await assert.rejects(next.release(), { code: 'SEMAPHORE_PERMIT_NOT_HELD' });
});

test('an unreachable Redis is an acquisition error with reason error', async () => {
  const sem = new SemaphoreService();
  const key = `redis+unix://${folder}/absent.sock?key=x`;
  await assert.rejects(sem.acquire(key, 1), (e) => {
    assert.equal(e.code, 'SEMAPHORE_ACQUISITION_FAILED');
    assert.equal(e.reason, 'error');
    assert.equal(e.cause.code, 'SHMSEM_ESEGMENT');
    return true;
  });
});
