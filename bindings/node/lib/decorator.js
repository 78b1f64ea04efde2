'use strict';
// @WithSemaphore: a method decorator that runs the method holding a seat.

const args = require('./args');
const errors = require('./errors');
const { SemaphoreService } = require('./service');

let defaultService = null;

/** The service that @WithSemaphore uses: ShmsemModule's once it is created,
 * else one made at first use with the default options. */
function getDefaultSemaphoreService() {
  if (defaultService === null) defaultService = new SemaphoreService();
  return defaultService;
}

function setDefaultSemaphoreService(service) {
  if (!(service instanceof SemaphoreService)) {
    throw args.typeError('service', 'a SemaphoreService', service);
  }
  defaultService = service;
}

function templateKey(template, callArgs) {
  return template.replace(/\{(\d+)\}/g, (_, n) => String(callArgs[Number(n)]));
}

function checkDecoratorOptions(options) {
  if (options === undefined) throw args.typeError('options', 'an object', options);
  const o = args.checkOptions(options, 'options');
  if (typeof o.key === 'string') args.checkKey(o.key, 'options.key');
  else if (typeof o.key !== 'function') throw args.typeError('options.key', 'a string or a function', o.key);
  args.checkInteger(o.permits, 'options.permits', 1, 1000000);
  // The acquire options are checked now too, so a bad decorator fails at
  // class definition rather than at the first call.
  args.acquireOptions({ ttl: o.ttl, waitTimeout: o.waitTimeout, autoRenew: o.autoRenew }, { ttl: 0 }, o.permits);
  const policy = o.onUnavailable === undefined ? 'throw' : o.onUnavailable;
  if (policy !== 'throw' && policy !== 'skip' && typeof policy !== 'function') {
    throw args.typeError('options.onUnavailable', "'throw', 'skip' or a function", policy);
  }
  return { ...o, onUnavailable: policy };
}

// Carries over what decorators below this one stamped on the method
// (reflect-metadata), so @Cron() and the like keep their registration.
function copyMetadata(from, to) {
  if (typeof Reflect.getMetadataKeys !== 'function') return;
  for (const k of Reflect.getOwnMetadataKeys(from)) {
    Reflect.defineMetadata(k, Reflect.getOwnMetadata(k, from), to);
  }
}

function WithSemaphore(options) {
  const o = checkDecoratorOptions(options);
  return function (target, propertyKey, descriptor) {
    if (!descriptor || typeof descriptor.value !== 'function') {
      throw args.typeError('@WithSemaphore target', 'a method', descriptor && descriptor.value);
    }
    const method = descriptor.value;
    const acquireOptions = {};
    for (const name of ['ttl', 'waitTimeout', 'autoRenew']) {
      if (o[name] !== undefined) acquireOptions[name] = o[name];
    }
    const wrapped = async function (...callArgs) {
      const service = getDefaultSemaphoreService();
      const key = typeof o.key === 'function' ? o.key(...callArgs) : templateKey(o.key, callArgs);
      let permit;
      try {
        permit = await service.acquire(key, o.permits, acquireOptions);
      } catch (e) {
        if (!errors.isAcquisitionError(e) || o.onUnavailable === 'throw') throw e;
        if (o.onUnavailable === 'skip') return undefined;
        const mapped = o.onUnavailable(key, e);
        throw mapped instanceof Error ? mapped : e;
      }
      return service._runHolding(permit, () => method.apply(this, callArgs));
    };
    Object.defineProperty(wrapped, 'name', { value: method.name });
    copyMetadata(method, wrapped);
    descriptor.value = wrapped;
    return descriptor;
  };
}

module.exports = { WithSemaphore, getDefaultSemaphoreService, setDefaultSemaphoreService };
