'use strict';
// Bound a backend call across the workers of a node:cluster HTTP server.
//
// Every cluster worker is its own process, so an in-process semaphore bounds
// one worker only. A shmsem semaphore is one bound for every process of the
// host: here at most BACKEND_SLOTS (2) requests are inside the backend call at
// once, however many workers run, and a worker killed in the middle of the
// call (OOM killer, SIGKILL) gives its seat back to the others at once.
//
//     node examples/node/cluster.js        # 8 workers on port 8080
//
// Settings (environment): WORKERS (8), LISTEN (a port or a unix socket path),
// BACKEND_KEY (the semaphore's key), BACKEND_SLOTS (2), BACKEND_MS (the
// simulated call's length, 8), BACKEND_TIMEOUT (ms a request waits for a seat
// before it gets 503, 30000), WITNESS_LOG (optional: a file that gets "begin",
// "enter", "exit" records with CLOCK_MONOTONIC nanoseconds, appended with
// O_APPEND, so that a test can check the bound from outside the library).
// The primary replaces a worker that dies, as PM2 does, prints "listening
// PID" for each worker that listens, and stops gracefully on SIGTERM.
const cluster = require('node:cluster');
const http = require('node:http');

const WORKERS = Number(process.env.WORKERS || 8);
const LISTEN = process.env.LISTEN || 8080;

if (cluster.isPrimary) {
  let stopping = false;
  for (let i = 0; i < WORKERS; i++) cluster.fork();
  cluster.on('listening', (worker) => console.log(`listening ${worker.process.pid}`));
  cluster.on('exit', () => {
    if (!stopping) cluster.fork();
  });
  // A graceful stop: each worker stops accepting, finishes the requests it
  // has, and exits; then the primary exits.
  process.on('SIGTERM', () => {
    stopping = true;
    for (const worker of Object.values(cluster.workers)) worker.disconnect();
  });
} else {
  const fs = require('node:fs');
  const { SemaphoreService, isAcquisitionError } = require('shmsem');

  const KEY = process.env.BACKEND_KEY || 'example.backend';
  const SLOTS = Number(process.env.BACKEND_SLOTS || 2);
  const MS = Number(process.env.BACKEND_MS || 8);
  const TIMEOUT = Number(process.env.BACKEND_TIMEOUT || 30000);
  const sem = new SemaphoreService();

  // One write per record to an O_APPEND file: records of different workers
  // never interleave.
  const witnessFd = process.env.WITNESS_LOG ? fs.openSync(process.env.WITNESS_LOG, 'a') : null;
  const witness = (event, id) => {
    if (witnessFd !== null) {
      fs.writeSync(witnessFd, `${process.hrtime.bigint()} ${process.pid} ${event} ${id}\n`);
    }
  };
  // Stands for a database, GPU or third-party API call.
  const backendCall = () => new Promise((resolve) => setTimeout(resolve, MS));

  http
    .createServer(async (req, res) => {
      const id = new URL(req.url, 'http://localhost').searchParams.get('id') || '-';
      witness('begin', id);
      let permit;
      try {
        permit = await sem.acquire(KEY, SLOTS, { waitTimeout: TIMEOUT });
      } catch (e) {
        res.writeHead(isAcquisitionError(e) ? 503 : 500, { 'Content-Type': 'text/plain' });
        res.end(`backend busy: ${e.reason || e.message}\n`);
        return;
      }
      try {
        witness('enter', id);
        await backendCall();
        witness('exit', id);
      } finally {
        await permit.release();
      }
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok\n');
    })
    .listen(LISTEN);
}
