'use strict';
// The npm package shmsem: a fleet-wide leased counting semaphore in shared
// memory (or Redis, with a redis:// key), with the API of the seed's
// ISemaphoreService, @WithSemaphore and a NestJS module. See docs/node.md.

const native = require('./native');
const errors = require('./errors');
const { SemaphoreService, Permit } = require('./service');
const decorator = require('./decorator');
const nest = require('./nest');
const args = require('./args');

/** Removes the semaphore's name (processes that have it open keep their copy).
 * true if removed, false if there was none. */
function remove(key) {
  args.checkKey(key);
  try {
    return native.remove(key);
  } catch (e) {
    throw errors.libraryError(e, key);
  }
}

// One assignment per name, so that Node's ESM loader sees every name
// (`import { SemaphoreService } from 'shmsem'`).
exports.SemaphoreService = SemaphoreService;
exports.Permit = Permit;
exports.WithSemaphore = decorator.WithSemaphore;
exports.getDefaultSemaphoreService = decorator.getDefaultSemaphoreService;
exports.setDefaultSemaphoreService = decorator.setDefaultSemaphoreService;
exports.ShmsemModule = nest.ShmsemModule;
exports.SEMAPHORE_SERVICE = nest.SEMAPHORE_SERVICE;
exports.ShmsemError = errors.ShmsemError;
exports.SemaphoreAcquisitionError = errors.SemaphoreAcquisitionError;
exports.SemaphorePermitNotHeldError = errors.SemaphorePermitNotHeldError;
exports.SemaphoreExtensionError = errors.SemaphoreExtensionError;
exports.isAcquisitionError = errors.isAcquisitionError;
exports.remove = remove;
exports.version = () => native.version();
