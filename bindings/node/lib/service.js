'use strict';
// SemaphoreService and Permit: the API of the seed's ISemaphoreService over
// the addon. One native handle per key, opened at first use and kept.

const native = require('./native');
const args = require('./args');
const errors = require('./errors');

// shmsem_open_options flags (shmsem/shmsem.h).
const OPEN_NOCREATE = 1;
const OPEN_FENCING = 2;
const OPEN_BARGING = 4;
const OPEN_FIFO = 8;

// What the addon wrote about the last grant it handed over, read at once:
// a Uint32Array (permit id low and high 32 bits, fencing token low and
// high) and the wall clock at the grant, in Date.now() milliseconds to the
// kernel's tick.
const grant = native.grant;
const grantTime = native.grantTime;
const uint64 = (lo, hi) => (hi === 0 ? String(lo) : ((BigInt(hi) << 32n) | BigInt(lo)).toString());

const SETTLED = Promise.resolve();

// The addon's functions of every acquire and release, held here rather
// than looked up on its exports object at each call.
const { tryAcquire: tryAcquireNative, release: releaseNative } = native;

// Only the service makes permits: it passes this to the constructor.
const MINT = Symbol('shmsem.Permit');

// A Permit collected unreleased gives its seats back: the registry's
// callback hands its handle to the addon, which releases it if it is still
// held. Registering every grant would cost about as much as the rest of an
// uncontended acquire and release together, and most permits are released
// within the turn of the event loop that took them; so a grant goes on
// `unwatched` (a strong reference: it cannot be collected there), and at the
// end of the turn, or when the list is long, the permits still held on it
// are registered and the rest forgotten.
const registry = new FinalizationRegistry((handle) => native.dropped(handle));
const SWEEP_AT = 512;
let unwatched = [];
let sweepTimer = null;

class Permit {
  #handle;
  #service;
  #released = false;
  #renewTimer = null;
  #id;
  #idHigh;
  #token;
  #tokenHigh;

  /** Made by SemaphoreService only. */
  constructor(mint, handle, service, key, weight, ttl) {
    if (mint !== MINT) {
      throw args.typeError('Permit', 'made by SemaphoreService.acquire or tryAcquire', mint);
    }
    this.#handle = handle;
    this.#service = service;
    this.#id = grant[0];
    this.#idHigh = grant[1];
    this.#token = grant[2];
    this.#tokenHigh = grant[3];
    this.key = key;
    this.weight = weight;
    this.ttl = ttl;
    this.acquiredAt = grantTime[0];
    this.expiresAt = ttl > 0 ? this.acquiredAt + ttl : Infinity;
    unwatched.push(this);
    if (unwatched.length >= SWEEP_AT) {
      Permit.#sweep();
    } else if (sweepTimer === null) {
      sweepTimer = setImmediate(Permit.#sweep);
      sweepTimer.unref();
    }
  }

  static #sweep() {
    if (sweepTimer !== null) {
      clearImmediate(sweepTimer);
      sweepTimer = null;
    }
    const list = unwatched;
    unwatched = [];
    for (const permit of list) {
      if (!permit.#released) registry.register(permit, permit.#handle);
    }
  }

  /** Unique within its semaphore: a decimal string, as ids are 64-bit. */
  get permitId() {
    return uint64(this.#id, this.#idHigh);
  }

  /** A bigint where the semaphore has fencing tokens, else null. */
  get fencingToken() {
    if (this.#token === 0 && this.#tokenHigh === 0) return null;
    return (BigInt(this.#tokenHigh) << 32n) | BigInt(this.#token);
  }

  get isAutoRenewing() {
    return this.#renewTimer !== null;
  }

  /** Renews the lease every third of its TTL from the event loop, so a loop
   * that is stuck stops renewing and the seat lapses, as a crash does. */
  startAutoRenew() {
    if (this.#released || this.ttl <= 0 || this.#renewTimer !== null) return;
    this.#service._renewing(this, true);
    this.#renewTimer = setInterval(() => {
      try {
        native.extend(this.#handle, this.ttl);
        this.expiresAt = Date.now() + this.ttl;
      } catch (e) {
        this.stopAutoRenew();
        this.#service.logger.warn(`shmsem: auto-renewal of permit ${this.permitId} of ${this.key} ` +
          `stopped: ${e.message}`);
      }
    }, Math.max(1, Math.floor(this.ttl / 3)));
    this.#renewTimer.unref();
  }

  stopAutoRenew() {
    if (this.#renewTimer !== null) {
      clearInterval(this.#renewTimer);
      this.#renewTimer = null;
      this.#service._renewing(this, false);
    }
  }

  /** Frees the seats. Idempotent. Rejects with SemaphorePermitNotHeldError when
   * they were lost first (TTL, force-released): the bound was not held throughout.
   * Not an async function: the settled promise it returns is shared, which
   * spares a promise per release. */
  release() {
    if (this.#released) return SETTLED;
    this.#released = true;
    if (this.#renewTimer !== null) this.stopAutoRenew();
    try {
      releaseNative(this.#handle);
    } catch (e) {
      if (errors.codeName(e) === 'SHMSEM_ENOTHELD') {
        return Promise.reject(new errors.SemaphorePermitNotHeldError(this.key, this.permitId, e.message));
      }
      return Promise.reject(errors.libraryError(e, this.key));
    }
    return SETTLED;
  }

  /** Sets the expiry to now + ttl ms. SemaphoreExtensionError when the seats were
   * lost first or the permit was released. */
  async extend(ttl) {
    args.checkInteger(ttl, 'ttl', 1, args.MAX_TTL);
    if (this.#released) {
      throw new errors.SemaphoreExtensionError(this.key, this.permitId,
        `permit ${this.permitId} of ${this.key} was released already`);
    }
    try {
      native.extend(this.#handle, ttl);
    } catch (e) {
      if (errors.codeName(e) === 'SHMSEM_EEXTEND') {
        this.stopAutoRenew();
        throw new errors.SemaphoreExtensionError(this.key, this.permitId, e.message);
      }
      throw errors.libraryError(e, this.key);
    }
    this.ttl = ttl;
    this.expiresAt = Date.now() + ttl;
  }

  async isHeld() {
    return !this.#released && native.isHeld(this.#handle);
  }

}

class SemaphoreService {
  #handles = new Map();
  // key -> the handle of its shared-memory semaphore for the addon's plain
  // functions, or null for a Redis key.
  #grantable = new Map();
  // The permits that renew, for shutdown to stop. Only those: a permit the
  // program drops is then collected, and its seats go back.
  #renewing = new Set();
  #shutDown = false;
  #openFlags;

  /**
   * @param {{defaults?: {ttl?: number, waitTimeout?: number, autoRenew?: boolean},
   *          logger?: {warn(message: string): void}}} [options]
   */
  constructor(options) {
    const o = args.checkOptions(options);
    this.defaults = args.serviceDefaults(o.defaults);
    // How the semaphores this service creates are made; one that exists
    // keeps its own.
    this.#openFlags = 0;
    if (o.fencing !== undefined && args.checkBoolean(o.fencing, 'options.fencing')) {
      this.#openFlags |= OPEN_FENCING;
    }
    if (o.fairness !== undefined) {
      if (o.fairness !== 'fifo' && o.fairness !== 'barging') {
        throw args.typeError('options.fairness', "'fifo' or 'barging'", o.fairness);
      }
      this.#openFlags |= o.fairness === 'barging' ? OPEN_BARGING : OPEN_FIFO;
    }
    this.logger = o.logger !== undefined ? o.logger : console;
    if (this.logger === null || typeof this.logger.warn !== 'function') {
      throw args.typeError('options.logger', 'an object with warn()', this.logger);
    }
  }

  #handle(key, permits) {
    let h = this.#handles.get(key);
    if (h === undefined) {
      h = new native.Semaphore(key, permits, this.#openFlags);
      this.#keep(key, h);
    }
    return h;
  }

  #keep(key, h) {
    this.#handles.set(key, h);
    // A backend that asks a server for a try is asked off this thread.
    this.#grantable.set(key, h.readsWithoutIo() ? h.handle() : null);
  }

  // One attempt on `key` (opened at first use) by the addon's plain
  // function: a permit's handle or null; undefined where a try is a round
  // trip to a server (Redis), which this thread must not wait for.
  #try(key, permits, o) {
    let semaphore = this.#grantable.get(key);
    if (semaphore === undefined) {
      this.#handle(key, permits);
      semaphore = this.#grantable.get(key);
    }
    return semaphore === null ? undefined : tryAcquireNative(semaphore, o.weight, o.ttl);
  }

  // The handle of an existing semaphore, or null if there is none.
  #existing(key) {
    args.checkKey(key);
    let h = this.#handles.get(key);
    if (h !== undefined) return h;
    try {
      h = new native.Semaphore(key, 1, OPEN_NOCREATE);
    } catch (e) {
      if (errors.codeName(e) === 'SHMSEM_ENOENT') return null;
      throw errors.libraryError(e, key);
    }
    this.#keep(key, h);
    return h;
  }

  #shutdownError(key) {
    return new errors.SemaphoreAcquisitionError(key, 'shutdown', `semaphore service is shut down (${key})`);
  }

  // The Permit of the grant the addon handed over last (`grant` describes it).
  #wrap(handle, key, o) {
    const permit = new Permit(MINT, handle, this, key, o.weight, o.ttl);
    if (o.autoRenew) permit.startAutoRenew();
    return permit;
  }

  _renewing(permit, on) {
    if (on) this.#renewing.add(permit);
    else this.#renewing.delete(permit);
  }

  /** Takes a seat (options.weight seats) of `key`, a semaphore of `permits`
   * seats, waiting up to options.waitTimeout ms on the library's thread.
   * Free seats are taken at once, with no request for the library's thread
   * and no trip back to the loop (a try never passes queued waiters, so the
   * order is the same); for them this is not an async function, which
   * spares the frame one would make for every call. */
  acquire(key, permits, options) {
    let o;
    try {
      args.checkKey(key);
      args.checkPermits(permits);
      o = args.acquireOptions(options, this.defaults, permits);
      if (this.#shutDown) throw this.#shutdownError(key);
      if (o.signal !== undefined && o.signal.aborted) {
        throw new errors.SemaphoreAcquisitionError(key, 'cancelled', `acquire of ${key} was aborted`,
          { cause: o.signal.reason });
      }
      let handle;
      try {
        handle = this.#try(key, permits, o);
      } catch (e) {
        throw errors.acquisitionError(key, e);
      }
      if (handle !== null && handle !== undefined) return Promise.resolve(this.#wrap(handle, key, o));
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#acquireWaiting(key, permits, o);
  }

  async #acquireWaiting(key, permits, o) {
    let token = null;
    let onAbort = null;
    let handle;
    try {
      if (o.signal !== undefined) {
        token = new native.CancelToken();
        onAbort = () => token.cancel();
        o.signal.addEventListener('abort', onAbort, { once: true });
      }
      handle = await this.#handle(key, permits).acquire(o.weight, o.waitTimeout, o.ttl, token);
    } catch (e) {
      throw errors.acquisitionError(key, e);
    } finally {
      if (onAbort !== null) o.signal.removeEventListener('abort', onAbort);
    }
    if (this.#shutDown) {
      // Won as the service shut down: give it back quietly.
      try {
        native.release(handle);
      } catch {
        // lost already: nothing to give back
      }
      throw this.#shutdownError(key);
    }
    native.describe(handle);
    return this.#wrap(handle, key, o);
  }

  /** One attempt, never waits: a Permit, or null when the seats are not free now,
   * others wait ahead, or the weight exceeds the capacity. */
  async tryAcquire(key, permits, options) {
    args.checkKey(key);
    args.checkPermits(permits);
    const o = args.acquireOptions(options, this.defaults, permits);
    if (this.#shutDown) return null;
    let handle;
    try {
      handle = this.#try(key, permits, o);
      if (handle === undefined) handle = this.#handle(key, permits).tryAcquire(o.weight, o.ttl);
    } catch (e) {
      throw errors.acquisitionError(key, e);
    }
    return handle === null ? null : this.#wrap(handle, key, o);
  }

  /** acquire, run fn, always release. A seat lost before the release is logged
   * (the work already ran), not thrown. */
  async withPermit(key, permits, fn, options) {
    args.checkFunction(fn, 'fn');
    const permit = await this.acquire(key, permits, options);
    return this._runHolding(permit, fn);
  }

  async _runHolding(permit, fn) {
    try {
      return await fn();
    } finally {
      try {
        await permit.release();
      } catch (e) {
        if (e && e.code === errors.PERMIT_NOT_HELD) {
          this.logger.warn(`shmsem: ${e.message}`);
        } else {
          throw e;
        }
      }
    }
  }

  /** Seats held now (leases of live holders, not yet expired). 0 for a key
   * that has no semaphore. */
  async usedPermits(key) {
    const h = this.#existing(key);
    return h === null ? 0 : h.used();
  }

  async availablePermits(key, permits) {
    args.checkPermits(permits);
    return Math.max(0, permits - (await this.usedPermits(key)));
  }

  /** Frees every seat of `key`; returns how many live leases were displaced
   * (their release() then throws SemaphorePermitNotHeldError). */
  async forceReleaseAll(key) {
    const h = this.#existing(key);
    if (h === null) return 0;
    try {
      return h.forceReleaseAll();
    } catch (e) {
      throw errors.libraryError(e, key);
    }
  }

  /** Application shutdown: waiting acquires end with reason 'shutdown', later
   * ones fail, auto-renewal stops. Held permits are not released. */
  shutdown() {
    if (this.#shutDown) return;
    this.#shutDown = true;
    for (const permit of [...this.#renewing]) permit.stopAutoRenew();
    for (const h of this.#handles.values()) h.shutdown();
  }

  get isShutDown() {
    return this.#shutDown;
  }

  /** NestJS calls these at app.close(): the first one shuts down. */
  onModuleDestroy() {
    this.shutdown();
  }

  onApplicationShutdown() {
    this.shutdown();
  }
}

module.exports = { SemaphoreService, Permit };
