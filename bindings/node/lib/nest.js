'use strict';
// ShmsemModule: a NestJS dynamic module that provides SEMAPHORE_SERVICE. It
// needs nothing from @nestjs/* at load time, so the package works without Nest.

const { SemaphoreService } = require('./service');
const { setDefaultSemaphoreService } = require('./decorator');

/** The injection token: Symbol.for, so two copies of the package agree. */
const SEMAPHORE_SERVICE = Symbol.for('shmsem.SEMAPHORE_SERVICE');

class ShmsemModule {
  /** The service with these defaults, global, and the one @WithSemaphore uses.
   * At app.close() it shuts down (SemaphoreService.shutdown). */
  static forRoot(options) {
    const o = options === undefined ? {} : options;
    return {
      module: ShmsemModule,
      global: true,
      providers: [
        {
          provide: SEMAPHORE_SERVICE,
          useFactory: () => {
            const service = new SemaphoreService(o);
            setDefaultSemaphoreService(service);
            return service;
          },
        },
      ],
      exports: [SEMAPHORE_SERVICE],
    };
  }
}

module.exports = { ShmsemModule, SEMAPHORE_SERVICE };
