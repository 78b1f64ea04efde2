#!/usr/bin/env node
// bench/node/node-rows.js: the Node rows of `make bench` (bench/node.cpp
// runs it). shmsem's npm package beside async-sema's Sema (in-process, no
// crash safety) and redis-semaphore (the multi-process choice of Node users
// today) on the redis-server that shmsem-bench started. Prints one JSON line:
//
//   shmsem_pair_ns, sema_pair_ns   awaited uncontended acquire+release,
//                                  medians of turns taken in alternation
//   shmsem_try_ns                  tryAcquire+release
//   shmsem_wake_p50_ns/_p99_ns     a release in this process to the return
//   redis_wake_p50_ns/_p99_ns      of a child process's awaited acquire
//   reclaim_median_ns/_max_ns      SIGKILL of a holding child to the return
//                                  of this process's awaited acquire
//   child_exit_median_ns           the same SIGKILL to the child's 'exit' event
//   cli_reclaim_median_ns/_max_ns, cli_exit_median_ns
//                                  the same with the shmsem CLI (C++) as the
//                                  holder, given --cli
//
// Usage: node-rows.js --lib DIR --socket PATH [--cli SHMSEM] [--smoke]
//   DIR: bindings/node/lib (SHMSEM_NODE_ADDON names the addon built)
// Exit 2 when the peers' packages are not installed (scripts/deps.sh bench
// runs `npm ci` here), 4 when the addon does not load.
'use strict';
const {fork, spawn} = require('node:child_process');

function usage(msg) {
  process.stderr.write(`node-rows: ${msg}\n` +
      'usage: node-rows.js --lib DIR --socket PATH [--cli SHMSEM] [--smoke]\n');
  process.exit(64);
}

const opts = {smoke: false};
for (let i = 2; i < process.argv.length; ++i) {
  const name = process.argv[i];
  if (name === '--smoke') {
    opts.smoke = true;
    continue;
  }
  const value = process.argv[++i];
  if (value === undefined) usage(`${name} needs a value`);
  if (name === '--lib') opts.lib = value;
  else if (name === '--socket') opts.socket = value;
  else if (name === '--cli') opts.cli = value;
  else if (name === '--child') opts.child = value;
  else if (name === '--key') opts.key = value;
  else usage(`unknown option ${name}`);
}
if (!opts.lib || !opts.socket) usage('--lib and --socket are required');

let Redis, RedisSemaphore, Sema, versions;
try {
  Redis = require('ioredis');
  RedisSemaphore = require('redis-semaphore').Semaphore;
  Sema = require('async-sema').Sema;
  versions = {
    async_sema: require('async-sema/package.json').version,
    redis_semaphore: require('redis-semaphore/package.json').version,
  };
} catch (e) {
  process.stderr.write(`node-rows: the peers' packages are not installed ` +
      `(run scripts/deps.sh bench, which runs npm ci in ${__dirname}): ${e.message}\n`);
  process.exit(2);
}
let shmsem;
try {
  shmsem = require(opts.lib);
} catch (e) {
  process.stderr.write(`node-rows: shmsem's addon does not load: ${e.message}\n`);
  process.exit(4);
}

const now = () => process.hrtime.bigint();
const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const quantile = (v, q) => [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(q * v.length))];
const settle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const message = (child, what) => new Promise((resolve, reject) => {
  const onMessage = (m) => {
    if (m.what !== what) return;
    child.off('message', onMessage);
    child.off('exit', onExit);
    resolve(m);
  };
  const onExit = (code, signal) => reject(new Error(`child exited (${code ?? signal}) before '${what}'`));
  child.on('message', onMessage);
  child.once('exit', onExit);
});
const newRedis = async () => {
  const client = new Redis({path: opts.socket, lazyConnect: true});
  await client.connect();
  return client;
};

// ---- the children: a waiter (wake latency) and a holder (reclaim) -------------------

// Wake latency: on 'go' the child starts an awaited acquire and says so; the
// parent lets it fall asleep, then releases; the child stamps the return.
async function childWaiter(kind) {
  let acquire;
  if (kind === 'shmsem') {
    const svc = new shmsem.SemaphoreService();
    acquire = async () => {
      const p = await svc.acquire(opts.key, 1, {waitTimeout: 60_000});
      return () => p.release();
    };
  } else {
    const client = await newRedis();
    acquire = async () => {
      const s = new RedisSemaphore(client, opts.key, 1, {acquireTimeout: 60_000});
      await s.acquire();
      return () => s.release();
    };
  }
  process.on('message', async (m) => {
    if (m.what === 'stop') process.exit(0);
    const got = acquire();
    process.send({what: 'waiting'});
    const release = await got;
    const t1 = now();
    await release();
    process.send({what: 'woke', t1: t1.toString()});
  });
  process.send({what: 'ready'});
}

async function childHolder() {
  const svc = new shmsem.SemaphoreService();
  await svc.acquire(opts.key, 1);
  process.send({what: 'held'});
  setInterval(() => {}, 1 << 30);
}

// ---- the parent's rows ---------------------------------------------------------------

const keyOf = (tag) => `shmsem-bench-node-${tag}-${process.pid}`;

async function pairs(n) {
  const svc = new shmsem.SemaphoreService();
  const sema = new Sema(8);
  const key = keyOf('pair');
  const awaited = async () => {
    for (let i = 0; i < n; ++i) {
      const p = await svc.acquire(key, 8);
      await p.release();
    }
  };
  const tried = async () => {
    for (let i = 0; i < n; ++i) {
      const p = await svc.tryAcquire(key, 8);
      await p.release();
    }
  };
  const peer = async () => {
    for (let i = 0; i < n; ++i) {
      await sema.acquire();
      sema.release();
    }
  };
  const time = async (f) => {
    const t0 = now();
    await f();
    return Number(now() - t0) / n;
  };
  // The JIT warm before any clock; then in turns, so that noise from
  // elsewhere falls on all three alike.
  await awaited(); await tried(); await peer();
  const ours = [], tries = [], theirs = [];
  for (let turn = 0; turn < (opts.smoke ? 1 : 7); ++turn) {
    ours.push(await time(awaited));
    tries.push(await time(tried));
    theirs.push(await time(peer));
  }
  shmsem.remove(key);
  return {shmsem_pair_ns: median(ours), shmsem_try_ns: median(tries), sema_pair_ns: median(theirs)};
}

async function wakeLatency(kind, trials) {
  const key = keyOf(`wake-${kind}`);
  const child = fork(__filename, [...process.argv.slice(2), '--child', `wait-${kind}`, '--key', key]);
  await message(child, 'ready');
  let hold, client;
  if (kind === 'shmsem') {
    const svc = new shmsem.SemaphoreService();
    hold = async () => {
      const p = await svc.acquire(key, 1, {waitTimeout: 60_000});
      return () => p.release();
    };
  } else {
    client = await newRedis();
    hold = async () => {
      const s = new RedisSemaphore(client, key, 1, {acquireTimeout: 60_000});
      await s.acquire();
      return () => s.release();
    };
  }
  const sample = [];
  for (let i = 0; i < trials; ++i) {
    const release = await hold();
    const waiting = message(child, 'waiting');
    const woke = message(child, 'woke');
    child.send({what: 'go'});
    await waiting;
    await settle(5);  // asleep in its acquire by now (a bound, not a sync)
    const t0 = now();
    await release();
    sample.push(Number(BigInt((await woke).t1) - t0));
  }
  child.send({what: 'stop'});
  await new Promise((resolve) => child.once('exit', resolve));
  if (client) {
    await client.del(`semaphore:${key}`);
    client.disconnect();
  } else {
    shmsem.remove(key);
  }
  return {p50: median(sample), p99: quantile(sample, 0.99)};
}

// A holder in another process: a node child, or the shmsem CLI (a small
// C++ process, whose teardown by the kernel is short) running `cat`.
async function startHolder(kind, key) {
  if (kind === 'node') {
    const child = fork(__filename, [...process.argv.slice(2), '--child', 'hold', '--key', key]);
    await message(child, 'held');
    return child;
  }
  const child = spawn(opts.cli, ['run', key, '-p', '1', '--', 'sh', '-c', 'echo held; exec cat >/dev/null'],
                      {stdio: ['pipe', 'pipe', 'inherit']});
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', (code) => reject(new Error(`shmsem run exited ${code} before holding`)));
  });
  return child;
}

async function reclaim(trials, kind) {
  const key = keyOf(`reclaim-${kind}`);
  const svc = new shmsem.SemaphoreService();
  const sample = [], exits = [];
  for (let i = 0; i < trials; ++i) {
    const child = await startHolder(kind, key);
    // When the loop hears of the child's end (SIGCHLD, waitpid): the
    // kernel's teardown of a node process is part of any reclaim.
    const exited = new Promise((resolve) => child.once('exit', () => resolve(now())));
    let t1 = 0n;
    const got = svc.acquire(key, 1, {waitTimeout: 60_000}).then((p) => {
      t1 = now();
      return p;
    });
    await settle(5);
    const t0 = now();
    child.kill('SIGKILL');
    const p = await got;
    sample.push(Number(t1 - t0));
    exits.push(Number((await exited) - t0));
    if (child.stdin) child.stdin.end();  // the CLI's orphaned cat ends
    await p.release();
  }
  shmsem.remove(key);
  return {reclaim_median_ns: median(sample), reclaim_max_ns: Math.max(...sample),
          child_exit_median_ns: median(exits)};
}

async function main() {
  if (opts.child === 'hold') return childHolder();
  if (opts.child) return childWaiter(opts.child.slice('wait-'.length));
  const out = {...(await pairs(opts.smoke ? 200 : 20_000))};
  const trials = opts.smoke ? 5 : 200;
  const ours = await wakeLatency('shmsem', trials);
  const theirs = await wakeLatency('redis', trials);
  Object.assign(out, {shmsem_wake_p50_ns: ours.p50, shmsem_wake_p99_ns: ours.p99,
                      redis_wake_p50_ns: theirs.p50, redis_wake_p99_ns: theirs.p99,
                      wake_trials: trials});
  Object.assign(out, await reclaim(opts.smoke ? 2 : 20, 'node'), versions);
  if (opts.cli) {
    const c = await reclaim(opts.smoke ? 2 : 20, 'cli');
    Object.assign(out, {cli_reclaim_median_ns: c.reclaim_median_ns, cli_reclaim_max_ns: c.reclaim_max_ns,
                        cli_exit_median_ns: c.child_exit_median_ns});
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`node-rows: ${e.stack || e}\n`);
  process.exit(1);
});
