/**
 * Starts scheduled campaigns when they are due. Every backend instance sweeps every
 * SCHEDULE.sweepMs, reading the injected Clock; each due campaign goes through
 * startCampaign(…, { due: true }), whose row lock lets exactly one instance start it.
 */
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Logger } from '../../shared/log.js';
import { SCHEDULE } from './policy.js';
import { startCampaign, type StartDeps } from './start.js';

export class ScheduleSweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<string[]> | null = null;

  constructor(private readonly d: StartDeps & { clock: Clock; log: Logger }) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (!this.running) void this.sweep();
    }, SCHEDULE.sweepMs);
    this.timer.unref();
    void this.sweep();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /**
   * Starts the campaigns due now; returns the ids this instance started. One sweep at a time:
   * called during one, it runs a fresh one after it (so it reads the clock as of the call).
   */
  async sweep(): Promise<string[]> {
    while (this.running) await this.running;
    this.running = (async () => {
      const started: string[] = [];
      try {
        const due = await this.d.db.query<{ id: string }>(
          `SELECT id FROM campaigns WHERE status = 'scheduled' AND scheduled_at <= $1 ORDER BY scheduled_at, id LIMIT $2`,
          [toIso(this.d.clock.now()), SCHEDULE.sweepBatch],
        );
        for (const { id } of due.rows) {
          try {
            if (await startCampaign(this.d, id, { due: true })) started.push(id);
          } catch (err) {
            // No provider, database trouble: it stays scheduled and the next sweep tries again.
            this.d.log.error({ err, campaignId: id }, 'could not start a scheduled campaign');
          }
        }
      } catch (err) {
        this.d.log.error({ err }, 'scheduled campaign sweep failed');
      } finally {
        this.running = null;
      }
      return started;
    })();
    return this.running;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The due-campaign sweep of this instance (tests step a ManualClock, then call sweep()). */
    campaignSchedule: ScheduleSweeper;
  }
}
