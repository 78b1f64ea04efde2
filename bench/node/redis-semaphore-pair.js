#!/usr/bin/env node
// bench/node/redis-semaphore-pair.js: the peer row of the Redis table.
// Times uncontended acquire+release pairs of the npm package
// redis-semaphore (a Semaphore over ioredis, as its README shows) against
// the redis-server that bench/redis.cpp started, and prints one JSON line:
//
//   {"pairs":N,"ns_per_pair":T,"redis_semaphore":"5.8.0","ioredis":"5.9.3"}
//
// Usage: redis-semaphore-pair.js (--socket PATH | --port N) [--pairs N] [--key K]
// Exit 2 with a message on stderr when the packages are not installed
// (scripts/deps.sh bench runs `npm ci` here).
'use strict';

function usage(msg) {
  process.stderr.write(`redis-semaphore-pair: ${msg}\n` +
      'usage: redis-semaphore-pair.js (--socket PATH | --port N) [--pairs N] [--key K]\n');
  process.exit(64);
}

const opts = {pairs: 2000, key: `shmsem-bench-peer-${process.pid}`};
for (let i = 2; i < process.argv.length; i += 2) {
  const name = process.argv[i];
  const value = process.argv[i + 1];
  if (value === undefined) usage(`${name} needs a value`);
  if (name === '--socket') opts.socket = value;
  else if (name === '--port') opts.port = Number(value);
  else if (name === '--pairs') opts.pairs = Number(value);
  else if (name === '--key') opts.key = value;
  else usage(`unknown option ${name}`);
}
if (!opts.socket === !opts.port) usage('give exactly one of --socket and --port');
if (!(opts.pairs > 0)) usage('--pairs must be a positive number');

let Redis, Semaphore, versions;
try {
  Redis = require('ioredis');
  Semaphore = require('redis-semaphore').Semaphore;
  versions = {
    redis_semaphore: require('redis-semaphore/package.json').version,
    ioredis: require('ioredis/package.json').version,
  };
} catch (e) {
  process.stderr.write(`redis-semaphore-pair: the peer's packages are not installed ` +
      `(run scripts/deps.sh bench, which runs npm ci in ${__dirname}): ${e.message}\n`);
  process.exit(2);
}

async function main() {
  const client = opts.socket ? new Redis({path: opts.socket, lazyConnect: true}) :
                               new Redis({host: '127.0.0.1', port: opts.port, lazyConnect: true});
  await client.connect();
  const limit = 8;
  // A new Semaphore object per pair, as its README uses it (each gets its
  // own identifier); the objects cost no round trip.
  const pair = async () => {
    const sem = new Semaphore(client, opts.key, limit);
    await sem.acquire();
    await sem.release();
  };
  // Scripts cached and the JIT warm before the clock starts.
  for (let i = 0; i < Math.min(500, opts.pairs); ++i) await pair();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < opts.pairs; ++i) await pair();
  const ns = Number(process.hrtime.bigint() - t0);
  await client.del(`semaphore:${opts.key}`);
  client.disconnect();
  process.stdout.write(JSON.stringify({pairs: opts.pairs, ns_per_pair: ns / opts.pairs,
                                       ...versions}) + '\n');
}

main().catch((e) => {
  process.stderr.write(`redis-semaphore-pair: ${e.stack || e}\n`);
  process.exit(1);
});
