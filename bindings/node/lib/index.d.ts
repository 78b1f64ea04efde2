// Types of the npm package shmsem (docs/node.md).

/** Options of acquire, tryAcquire and withPermit. Durations are milliseconds. */
export interface AcquireOptions {
  /** Lease TTL; 0: no expiry (a dead process's seat comes back anyway). Default: the service's. */
  ttl?: number;
  /** Total wait budget; undefined or Infinity: wait for ever; 0: do not wait. */
  waitTimeout?: number;
  /** Renew the lease every third of its TTL from the event loop. */
  autoRenew?: boolean;
  /** Seats this permit takes (1..permits). Default 1. */
  weight?: number;
  /** Aborting it ends a waiting acquire with reason 'cancelled'. */
  signal?: AbortSignal;
}

export interface ServiceDefaults {
  ttl?: number;
  waitTimeout?: number;
  autoRenew?: boolean;
}

export interface SemaphoreServiceOptions {
  defaults?: ServiceDefaults;
  /** Shared memory: semaphores this service creates give grants fencing tokens. */
  fencing?: boolean;
  /** Shared memory: the policy of semaphores this service creates ('barging', the
   * default: a running request may pass the sleeping ones for up to 1 ms; or 'fifo':
   * strict order, every wait bounded). A Redis key is always FIFO and refuses 'barging'. */
  fairness?: 'fifo' | 'barging';
  /** Where lost seats and stopped renewals are reported. Default: console. */
  logger?: { warn(message: string): void };
}

/** A leased seat. */
export declare class Permit {
  private constructor();
  readonly key: string;
  /** Unique within its semaphore (a decimal 64-bit number). */
  readonly permitId: string;
  readonly weight: number;
  /** 0: no TTL. */
  readonly ttl: number;
  /** The wall clock at the grant, in Date.now() milliseconds to the kernel's tick. */
  readonly acquiredAt: number;
  /** Date.now() at which the lease lapses; Infinity without TTL. */
  readonly expiresAt: number;
  /** Strictly increasing per grant where the semaphore has fencing tokens (Redis, or
   * shared memory created with them); null otherwise. */
  readonly fencingToken: bigint | null;
  readonly isAutoRenewing: boolean;
  /** Frees the seats. Idempotent. Rejects with SemaphorePermitNotHeldError when they were lost first. */
  release(): Promise<void>;
  /** Sets the expiry to now + ttl. Rejects with SemaphoreExtensionError when the seats were lost. */
  extend(ttl: number): Promise<void>;
  isHeld(): Promise<boolean>;
  stopAutoRenew(): void;
}
export type ISemaphorePermit = Permit;

export declare class SemaphoreService {
  constructor(options?: SemaphoreServiceOptions);
  readonly defaults: Required<Omit<ServiceDefaults, 'waitTimeout'>> & { waitTimeout: number | undefined };
  readonly isShutDown: boolean;
  acquire(key: string, permits: number, options?: AcquireOptions): Promise<Permit>;
  tryAcquire(key: string, permits: number, options?: Omit<AcquireOptions, 'waitTimeout' | 'signal'>): Promise<Permit | null>;
  withPermit<T>(key: string, permits: number, fn: () => T | Promise<T>, options?: AcquireOptions): Promise<T>;
  usedPermits(key: string): Promise<number>;
  availablePermits(key: string, permits: number): Promise<number>;
  forceReleaseAll(key: string): Promise<number>;
  /** Waiting acquires end with reason 'shutdown', later ones fail, auto-renewal stops; held permits stay. */
  shutdown(): void;
  onModuleDestroy(): void;
  onApplicationShutdown(): void;
}

/** The seed's interface: what SEMAPHORE_SERVICE provides. */
export type ISemaphoreService = Pick<SemaphoreService,
  'acquire' | 'tryAcquire' | 'withPermit' | 'usedPermits' | 'availablePermits' | 'forceReleaseAll'>;

export type SemaphoreAcquisitionReason = 'timeout' | 'cancelled' | 'shutdown' | 'exceeds_capacity' | 'error';

export declare class SemaphoreAcquisitionError extends Error {
  readonly code: 'SEMAPHORE_ACQUISITION_FAILED';
  readonly key: string;
  readonly reason: SemaphoreAcquisitionReason;
}

export declare class SemaphorePermitNotHeldError extends Error {
  readonly code: 'SEMAPHORE_PERMIT_NOT_HELD';
  readonly key: string;
  readonly permitId: string;
}

export declare class SemaphoreExtensionError extends Error {
  readonly code: 'SEMAPHORE_EXTENSION_FAILED';
  readonly key: string;
  readonly permitId: string;
}

/** A library failure that is none of the above: a bad key (SHMSEM_EINVAL), an unusable
 * segment or unreachable Redis (SHMSEM_ESEGMENT), an untrusted owner (SHMSEM_EUNTRUSTED). */
export declare class ShmsemError extends Error {
  readonly code: string;
}

/** True for a SemaphoreAcquisitionError of any copy of this package (by code). */
export declare function isAcquisitionError(e: unknown): e is SemaphoreAcquisitionError;

export interface WithSemaphoreOptions<A extends unknown[] = any[]> {
  /** A template where {n} is the n-th argument, or a function of the arguments. */
  key: string | ((...args: A) => string);
  permits: number;
  ttl?: number;
  waitTimeout?: number;
  autoRenew?: boolean;
  /** On any acquisition failure: 'throw' (default), 'skip' (resolve undefined without
   * running) or a function giving the error to throw (a non-Error throws the original). */
  onUnavailable?: 'throw' | 'skip' | ((key: string, error: SemaphoreAcquisitionError) => unknown);
}

export declare function WithSemaphore(
  options: WithSemaphoreOptions,
): <T>(target: object, propertyKey: string | symbol, descriptor: TypedPropertyDescriptor<T>) => TypedPropertyDescriptor<T>;

export declare function getDefaultSemaphoreService(): SemaphoreService;
export declare function setDefaultSemaphoreService(service: SemaphoreService): void;

export declare const SEMAPHORE_SERVICE: unique symbol;

export interface ShmsemModuleOptions extends SemaphoreServiceOptions {}

export declare class ShmsemModule {
  /** A NestJS DynamicModule (typed loosely so that the package needs no @nestjs types). */
  static forRoot(options?: ShmsemModuleOptions): {
    module: typeof ShmsemModule;
    global: boolean;
    providers: any[];
    exports: any[];
  };
}

/** Removes the semaphore's name; true if removed, false if there was none. */
export declare function remove(key: string): boolean;
export declare function version(): string;
