'use strict';
// A real node:cluster fleet under load, with workers SIGKILLed while they hold
// a seat.
//
// examples/node/cluster.js runs 8 workers; they let at most 2 requests at a
// time into an 8 ms "backend call". autocannon sends it 3,000 requests
// (about 12-15 s) over a unix socket while this test SIGKILLs a worker that
// is inside the call every 0.9 s (the primary forks a new one). The workers
// append begin/enter/exit records to an O_APPEND witness log, outside the
// library; from it the test checks the bound, and which requests were lost
// on killed workers. One line of figures is printed.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const autocannon = require('autocannon');
const { uniqueKey, nextLine, exited } = require('./helpers');
const { SemaphoreService } = require('../lib');

const EXAMPLE = path.join(__dirname, '..', '..', '..', 'examples', 'node', 'cluster.js');
const WORKERS = 8;
const SLOTS = 2;
const SECTION_MS = 8;
const CONNECTIONS = 16;
// About 12-15 s of load; a fixed number of requests, so that
// none is cut short when the load stops.
const REQUESTS = 3000;
const KILL_EVERY_MS = 900;
const MIN_KILLS = 8;
// The target is 80% of the ideal. On a 2-core machine that runs the whole
// fleet (8 workers, the primary, autocannon, the respawns) this reached
// 75-90% while other builds ran, and 28% at a load average of 10, so the
// assertion is the bound of the gunicorn fleet's test and the figure is
// printed; SHMSEM_FLEET_MIN_RATE=0.8 asks for the target.
const MIN_RATE = Number(process.env.SHMSEM_FLEET_MIN_RATE || 0.4);

function readWitness(file) {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [t, pid, event, id] = line.split(' ');
      return { t: BigInt(t), pid: Number(pid), event, id };
    })
    .sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : 0));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('a node:cluster fleet keeps the bound while workers are SIGKILLed', { timeout: 240000 }, async (t) => {
  const key = uniqueKey(t, 'cluster');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shmsem-node-cluster.'));
  const sock = path.join(tmp, 'http.sock');
  const witness = path.join(tmp, 'witness.log');
  fs.writeFileSync(witness, '');
  // The example requires 'shmsem', as an application would: NODE_PATH
  // points at a folder where that name is this package.
  const modules = path.join(tmp, 'node_modules');
  fs.mkdirSync(modules);
  fs.symlinkSync(path.join(__dirname, '..'), path.join(modules, 'shmsem'));
  const primary = spawn(process.execPath, [EXAMPLE], {
    env: {
      ...process.env,
      NODE_PATH: modules,
      WORKERS: String(WORKERS),
      LISTEN: sock,
      BACKEND_KEY: key,
      BACKEND_SLOTS: String(SLOTS),
      BACKEND_MS: String(SECTION_MS),
      WITNESS_LOG: witness,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => {
    primary.kill('SIGKILL');
  });

  const workers = new Set();
  for (let i = 0; i < WORKERS; i++) workers.add(Number((await nextLine(primary)).split(' ')[1]));
  // Later lines: replacements of killed workers.
  (async () => {
    try {
      for (;;) workers.add(Number((await nextLine(primary)).split(' ')[1]));
    } catch {
      // the primary exited
    }
  })();

  let nextId = 0;
  const statuses = new Map();
  let lastResponse = 0n;
  const load = autocannon({
    url: 'http://localhost',
    socketPath: sock,
    connections: CONNECTIONS,
    amount: REQUESTS,
    // A request on a connection whose worker died can wait for no answer;
    // the rate below is measured up to the last response.
    timeout: 10,
    requests: [
      {
        setupRequest: (req, context) => {
          context.id = `r${++nextId}`;
          statuses.set(context.id, null);
          return { ...req, path: `/backend?id=${context.id}` };
        },
        onResponse: (status, body, context) => {
          statuses.set(context.id, status);
          lastResponse = process.hrtime.bigint();
        },
      },
    ],
  });
  const started = process.hrtime.bigint();
  let loading = true;
  load.then(() => {
    loading = false;
  });

  // Kill a worker that is inside the section: a worker serves many requests
  // at once, so "inside" is a request whose "enter" has no "exit" yet.
  const kills = new Map();
  let witnessPos = 0;
  const openIds = new Map(); // request id -> pid, inside the section
  const insideNow = () => {
    const fd = fs.openSync(witness, 'r');
    const size = fs.fstatSync(fd).size;
    const chunk = Buffer.alloc(size - witnessPos);
    fs.readSync(fd, chunk, 0, chunk.length, witnessPos);
    fs.closeSync(fd);
    const text = chunk.toString('utf8');
    const complete = text.slice(0, text.lastIndexOf('\n') + 1);
    witnessPos += Buffer.byteLength(complete);
    for (const line of complete.split('\n').filter(Boolean)) {
      const [, pid, event, id] = line.split(' ');
      if (event === 'enter') openIds.set(id, Number(pid));
      else if (event === 'exit') openIds.delete(id);
    }
    return [...new Set(openIds.values())].filter((pid) => !kills.has(pid));
  };
  let nextKill = Date.now() + KILL_EVERY_MS;
  for (;;) {
    await sleep(Math.max(0, nextKill - Date.now()));
    nextKill += KILL_EVERY_MS;
    if (!loading) break;
    for (let attempt = 0; attempt < 50; attempt++) {
      const victims = insideNow().filter((pid) => workers.has(pid));
      if (victims.length > 0) {
        // The time just before the kill: from then on the worker runs no
        // more code.
        kills.set(victims[0], process.hrtime.bigint());
        process.kill(victims[0], 'SIGKILL');
        break;
      }
      await sleep(2);
    }
  }
  const result = await load;
  const elapsed = Number(lastResponse - started) / 1e9;
  primary.kill('SIGTERM');
  assert.deepEqual(await exited(primary), [0, null]);

  // --- the witness: concurrency, and what the killed workers were doing
  const records = readWitness(witness);
  const events = [];
  const openEnter = new Map(); // request id -> pid
  for (const r of records) {
    if (r.event === 'enter') {
      openEnter.set(r.id, r.pid);
      events.push([r.t, 1]);
    } else if (r.event === 'exit') {
      openEnter.delete(r.id);
      events.push([r.t, -1]);
    }
  }
  // A request of a worker killed inside the section left it at the kill.
  for (const [id, pid] of openEnter) {
    assert.ok(kills.has(pid), `request ${id} entered the section on worker ${pid} and never left`);
    events.push([kills.get(pid), -1]);
  }
  events.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1])); // exits first at a tie
  let inside = 0;
  let peak = 0;
  for (const [, d] of events) {
    inside += d;
    peak = Math.max(peak, inside);
  }
  const killedHolding = [...kills.keys()].filter((pid) => [...openEnter.values()].includes(pid));

  // --- the requests: every one that was not on a killed worker got 200
  const pidsOf = new Map();
  for (const r of records) {
    if (!pidsOf.has(r.id)) pidsOf.set(r.id, new Set());
    pidsOf.get(r.id).add(r.pid);
  }
  let ok = 0;
  const failed = [];
  for (const [id, status] of statuses) {
    if (status === 200) ok++;
    else failed.push([id, status]);
  }
  for (const [id, status] of failed) {
    // No response: the connection died with its worker (no record at all:
    // the worker died before the request reached the app). A response
    // other than 200 is a failure.
    assert.equal(status, null, `request ${id} got HTTP ${status}`);
    const pids = [...(pidsOf.get(id) || [])];
    assert.ok(pids.every((pid) => kills.has(pid)), `request ${id} got no response on live worker(s) ${pids}`);
  }

  // --- after the load: no seat is held. Taking both seats reaps the last
  // killed workers' seats if nobody did yet.
  const sem = new SemaphoreService();
  const all = await sem.acquire(key, SLOTS, { weight: SLOTS, waitTimeout: 10000 });
  await all.release();
  assert.equal(await sem.usedPermits(key), 0);

  const ideal = (SLOTS * 1000) / SECTION_MS;
  const rate = ok / elapsed;
  console.log(`node:cluster fleet: ${statuses.size} requests in ${elapsed.toFixed(1)} s, ${ok} x 200, ` +
    `${failed.length} lost on killed workers; ${kills.size} kills, ${killedHolding.length} inside the ` +
    `section; max concurrency ${peak} (bound ${SLOTS}); autocannon errors ${result.errors}, ` +
    `timeouts ${result.timeouts}, non-2xx ${result.non2xx}; ${rate.toFixed(0)} req/s = ` +
    `${((100 * rate) / ideal).toFixed(0)}% of the ideal ${ideal.toFixed(0)} req/s`);
  assert.ok(peak <= SLOTS, `witness log kept in ${tmp}`);
  assert.equal(peak, SLOTS); // the load did reach the bound: the check above was not idle
  assert.ok(killedHolding.length >= MIN_KILLS, `only ${killedHolding.length} kills inside the section`);
  assert.equal(result.non2xx, 0);
  assert.ok(failed.length >= killedHolding.length, 'the requests inside killed workers got no response');
  assert.ok(rate >= MIN_RATE * ideal, `${rate.toFixed(0)} req/s is below ${100 * MIN_RATE}% of ${ideal} req/s`);
  fs.rmSync(tmp, { recursive: true, force: true });
});
