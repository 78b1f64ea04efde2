'use strict';
// Argument checks shared by the service and the decorator. A wrong type is a
// TypeError, a value out of range a RangeError, each with Node's own codes
// (ERR_INVALID_ARG_TYPE, ERR_OUT_OF_RANGE) and the argument's name.

const MAX_SEATS = 1000000;
const MAX_TTL = 1000000000;
const MAX_WAIT = 2147483647;

function typeError(name, expected, value) {
  const e = new TypeError(`${name} must be ${expected}, got ${describe(value)}`);
  e.code = 'ERR_INVALID_ARG_TYPE';
  return e;
}

function rangeError(name, expected, value) {
  const e = new RangeError(`${name} must be ${expected}, got ${describe(value)}`);
  e.code = 'ERR_OUT_OF_RANGE';
  return e;
}

function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '...' : value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'undefined') return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  return typeof value;
}

function checkKey(key, name = 'key') {
  if (typeof key !== 'string') throw typeError(name, 'a string', key);
  if (key.length === 0) throw rangeError(name, 'a non-empty string', key);
  return key;
}

function checkInteger(value, name, lo, hi) {
  if (typeof value !== 'number') throw typeError(name, 'a number', value);
  if (!Number.isInteger(value) || value < lo || value > hi) {
    throw rangeError(name, `an integer in [${lo}, ${hi}]`, value);
  }
  return value;
}

function checkPermits(permits) {
  return checkInteger(permits, 'permits', 1, MAX_SEATS);
}

function checkTtl(ttl, name = 'ttl') {
  return checkInteger(ttl, name, 0, MAX_TTL);
}

// undefined or Infinity: wait for ever (-1 for the addon).
function checkWaitTimeout(waitTimeout) {
  if (waitTimeout === undefined || waitTimeout === Infinity) return -1;
  return checkInteger(waitTimeout, 'waitTimeout', 0, MAX_WAIT);
}

function checkBoolean(value, name) {
  if (typeof value !== 'boolean') throw typeError(name, 'a boolean', value);
  return value;
}

function checkFunction(value, name) {
  if (typeof value !== 'function') throw typeError(name, 'a function', value);
  return value;
}

function checkSignal(signal) {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== 'object' || typeof signal.aborted !== 'boolean' ||
      typeof signal.addEventListener !== 'function') {
    throw typeError('options.signal', 'an AbortSignal', signal);
  }
  return signal;
}

function checkOptions(options, name = 'options') {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(name, 'an object', options);
  }
  return options;
}

const NO_OPTIONS = Object.freeze({});

// The acquire options with the service's defaults applied, checked.
function acquireOptions(options, defaults, permits) {
  const o = options === undefined ? NO_OPTIONS : checkOptions(options);
  const ttl = o.ttl !== undefined ? checkTtl(o.ttl, 'options.ttl') : defaults.ttl;
  const autoRenew = o.autoRenew !== undefined ? checkBoolean(o.autoRenew, 'options.autoRenew')
    : defaults.autoRenew;
  const waitTimeout = checkWaitTimeout(o.waitTimeout !== undefined ? o.waitTimeout : defaults.waitTimeout);
  const weight = o.weight !== undefined ? checkInteger(o.weight, 'options.weight', 1, MAX_SEATS) : 1;
  if (weight > permits) throw rangeError('options.weight', `at most permits (${permits})`, weight);
  return { ttl, autoRenew, waitTimeout, weight, signal: checkSignal(o.signal) };
}

function serviceDefaults(defaults) {
  const d = checkOptions(defaults, 'defaults');
  return {
    ttl: d.ttl !== undefined ? checkTtl(d.ttl, 'defaults.ttl') : 0,
    waitTimeout: d.waitTimeout !== undefined ? (checkWaitTimeout(d.waitTimeout), d.waitTimeout) : undefined,
    autoRenew: d.autoRenew !== undefined ? checkBoolean(d.autoRenew, 'defaults.autoRenew') : false,
  };
}

module.exports = {
  typeError,
  rangeError,
  checkKey,
  checkInteger,
  checkPermits,
  checkTtl,
  checkWaitTimeout,
  checkBoolean,
  checkFunction,
  checkOptions,
  acquireOptions,
  serviceDefaults,
  MAX_TTL,
};
