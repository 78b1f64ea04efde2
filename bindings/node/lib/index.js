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

module.exports = {
  SemaphoreService,
  Permit,
  WithSemaphore: decorator.WithSemaphore,
  getDefaultSemaphoreService: decorator.getDefaultSemaphoreService,
  setDefaultSemaphoreService: decorator.setDefaultSemaphoreService,
  ShmsemModule: nest.ShmsemModule,
  SEMAPHORE_SERVICE: nest.SEMAPHORE_SERVICE,
  ShmsemError: errors.ShmsemError,
  SemaphoreAcquisitionError: errors.SemaphoreAcquisitionError,
  SemaphorePermitNotHeldError: errors.SemaphorePermitNotHeldError,
  SemaphoreExtensionError: errors.SemaphoreExtensionError,
  isAcquisitionError: errors.isAcquisitionError,
  remove,
  version: () => native.version(),
};
