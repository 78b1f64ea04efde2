// The service API of the seed, without NestJS: a bound of 5 seats on a
// legacy API, shared by every process of the host that uses the key.
import {
  SemaphoreService,
  Permit,
  SemaphoreAcquisitionError,
  SemaphorePermitNotHeldError,
  isAcquisitionError,
} from 'shmsem';

const sem = new SemaphoreService({ defaults: { ttl: 60_000 } });

async function fetchReport(tenantId: string): Promise<string> {
  return `report of ${tenantId}`;
}

export async function withManualPermit(tenantId: string, signal?: AbortSignal): Promise<string> {
  const permit: Permit = await sem.acquire('legacy-api', 5, { waitTimeout: 10_000, signal });
  try {
    const ttlLeft: number = permit.expiresAt - Date.now();
    const token: bigint | null = permit.fencingToken;
    return `${await fetchReport(tenantId)} (${ttlLeft} ms, token ${token ?? 'none'})`;
  } finally {
    await permit.release();
  }
}

export async function ifCapacity(tenantId: string): Promise<string | undefined> {
  const permit = await sem.tryAcquire('legacy-api', 5);
  if (!permit) return undefined;
  try {
    return await fetchReport(tenantId);
  } finally {
    await permit.release();
  }
}

export async function bounded(tenantId: string): Promise<string> {
  try {
    return await sem.withPermit('legacy-api', 5, () => fetchReport(tenantId), { waitTimeout: 1_000 });
  } catch (e) {
    if (isAcquisitionError(e)) {
      const reason: 'timeout' | 'cancelled' | 'shutdown' | 'exceeds_capacity' | 'error' = e.reason;
      return `busy (${reason})`;
    }
    throw e;
  }
}

export async function snapshot(key: string, permits: number): Promise<{ used: number; available: number }> {
  return { used: await sem.usedPermits(key), available: await sem.availablePermits(key, permits) };
}

export async function longWork(): Promise<void> {
  const permit = await sem.acquire('video:encode', 2, { ttl: 30_000, autoRenew: true });
  try {
    if (permit.isAutoRenewing) permit.stopAutoRenew();
    await permit.extend(120_000);
  } catch (e) {
    if (e instanceof SemaphoreAcquisitionError || e instanceof SemaphorePermitNotHeldError) throw e;
  } finally {
    await permit.release();
  }
}
