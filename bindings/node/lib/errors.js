'use strict';
// The error classes. Callers tell them apart by `code` (and `reason`), not by
// instanceof: two copies of the package in one process (CJS and ESM, or two
// versions) then still agree.

const ACQUISITION_FAILED = 'SEMAPHORE_ACQUISITION_FAILED';
const PERMIT_NOT_HELD = 'SEMAPHORE_PERMIT_NOT_HELD';
const EXTENSION_FAILED = 'SEMAPHORE_EXTENSION_FAILED';

// The C ABI's codes (shmsem/shmsem.h), by value.
const C_CODES = {
  [-1]: 'SHMSEM_ETIMEDOUT',
  [-2]: 'SHMSEM_EUNAVAILABLE',
  [-3]: 'SHMSEM_ENOTHELD',
  [-4]: 'SHMSEM_EINVAL',
  [-5]: 'SHMSEM_ESEGMENT',
  [-6]: 'SHMSEM_ECANCELED',
  [-7]: 'SHMSEM_ESHUTDOWN',
  [-8]: 'SHMSEM_EEXCEEDS',
  [-9]: 'SHMSEM_EEXTEND',
  [-10]: 'SHMSEM_EUNKNOWN',
  [-11]: 'SHMSEM_ENOMEM',
  [-12]: 'SHMSEM_ENOENT',
  [-13]: 'SHMSEM_EUNTRUSTED',
};

/** A failure of the library that is none of the semaphore errors below: a bad key
 * (code SHMSEM_EINVAL), an unusable segment or unreachable Redis (SHMSEM_ESEGMENT),
 * an untrusted segment owner (SHMSEM_EUNTRUSTED). The message names the key. */
class ShmsemError extends Error {
  constructor(message, code, options) {
    super(message, options);
    this.name = 'ShmsemError';
    this.code = code;
  }
}

class SemaphoreAcquisitionError extends Error {
  constructor(key, reason, message, options) {
    super(message, options);
    this.name = 'SemaphoreAcquisitionError';
    this.code = ACQUISITION_FAILED;
    this.key = key;
    this.reason = reason;
  }
}

// The errors of a held permit name it.
class PermitError extends Error {
  constructor(name, code, key, permitId, message, options) {
    super(message, options);
    this.name = name;
    this.code = code;
    this.key = key;
    this.permitId = permitId;
  }
}

class SemaphorePermitNotHeldError extends PermitError {
  constructor(key, permitId, message, options) {
    super('SemaphorePermitNotHeldError', PERMIT_NOT_HELD, key, permitId, message, options);
  }
}

class SemaphoreExtensionError extends PermitError {
  constructor(key, permitId, message, options) {
    super('SemaphoreExtensionError', EXTENSION_FAILED, key, permitId, message, options);
  }
}

function codeName(e) {
  return e && typeof e.shmsemCode === 'number' ? C_CODES[e.shmsemCode] || 'SHMSEM_EUNKNOWN' : undefined;
}

// A native failure as a ShmsemError whose message names the key; anything
// else (TypeError, RangeError) as is.
function libraryError(e, key) {
  const code = codeName(e);
  if (code === undefined) return e;
  let message = e.message;
  if (typeof key === 'string' && !message.includes(key)) {
    const shown = key.length > 64 ? `${key.slice(0, 64)}...` : key;
    message = `${message} (key ${JSON.stringify(shown)})`;
  }
  return new ShmsemError(message, code);
}

const ACQUIRE_REASONS = {
  SHMSEM_ETIMEDOUT: 'timeout',
  SHMSEM_ECANCELED: 'cancelled',
  SHMSEM_ESHUTDOWN: 'shutdown',
  SHMSEM_EEXCEEDS: 'exceeds_capacity',
};

// An acquire's failure: bad arguments stay what they are (a TypeError,
// RangeError or ShmsemError SHMSEM_EINVAL is a bug of the caller, not an
// unavailable seat); every other failure is a SemaphoreAcquisitionError.
function acquisitionError(key, e) {
  const code = codeName(e);
  if (code === undefined || code === 'SHMSEM_EINVAL') return libraryError(e, key);
  const reason = ACQUIRE_REASONS[code] || 'error';
  return new SemaphoreAcquisitionError(key, reason, e.message,
    reason === 'error' ? { cause: new ShmsemError(e.message, code) } : undefined);
}

function isAcquisitionError(e) {
  return e !== null && typeof e === 'object' && e.code === ACQUISITION_FAILED;
}

module.exports = {
  ACQUISITION_FAILED,
  PERMIT_NOT_HELD,
  EXTENSION_FAILED,
  ShmsemError,
  SemaphoreAcquisitionError,
  SemaphorePermitNotHeldError,
  SemaphoreExtensionError,
  codeName,
  libraryError,
  acquisitionError,
  isAcquisitionError,
};
