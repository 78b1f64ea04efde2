// The seed's NestJS services over shmsem: the service injected with
// SEMAPHORE_SERVICE, and @WithSemaphore beside @Cron.
import 'reflect-metadata';
import { Injectable, Inject, Module } from '@nestjs/common';
import { Cron, CronExpression, ScheduleModule } from '@nestjs/schedule';
import { SEMAPHORE_SERVICE, ISemaphoreService, ShmsemModule, WithSemaphore } from 'shmsem';

@Injectable()
export class ReportService {
  constructor(@Inject(SEMAPHORE_SERVICE) private readonly semaphore: ISemaphoreService) {}

  async fetchReport(tenantId: string): Promise<string> {
    return this.semaphore.withPermit('legacy-api', 5, async () => `report of ${tenantId}`);
  }

  async unblock(key: string): Promise<number> {
    return this.semaphore.forceReleaseAll(key);
  }
}

class TenantBusyError extends Error {}

@Injectable()
export class EncodingService {
  // At most 2 encodes at a time across every process of the host.
  @WithSemaphore({ key: 'video:encode', permits: 2, ttl: 600_000, autoRenew: true })
  async encode(videoId: string): Promise<void> {
    void videoId;
  }

  @WithSemaphore({ key: 'export:{0}', permits: 1, waitTimeout: 5_000, onUnavailable: 'skip' })
  async exportTenant(tenantId: string): Promise<void> {
    void tenantId;
  }

  @WithSemaphore({
    key: (tenantId: string) => `import:${tenantId}`,
    permits: 1,
    waitTimeout: 0,
    onUnavailable: (key) => new TenantBusyError(key),
  })
  async importTenant(tenantId: string): Promise<void> {
    void tenantId;
  }

  @Cron(CronExpression.EVERY_MINUTE)
  @WithSemaphore({ key: 'sync', permits: 1, onUnavailable: 'skip' })
  async sync(): Promise<void> {}
}

@Module({
  imports: [ScheduleModule.forRoot(), ShmsemModule.forRoot({ defaults: { ttl: 60_000 } })],
  providers: [ReportService, EncodingService],
})
export class AppModule {}
