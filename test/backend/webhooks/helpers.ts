/** Shared pieces of the webhook tests: a service on a fresh database with time under the test's control. */
import { ManualClock } from '../../../src/shared/clock.js';
import { loadConfig } from '../../../src/shared/config.js';
import { silentLogger } from '../../../src/shared/log.js';
import { EventBus } from '../../../src/backend/events.js';
import { WebhookService, type WebhookServiceOptions } from '../../../src/backend/webhooks/service.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { pollUntil } from '../../harness/dns.js';
import { ManualTimers } from '../../shared/net/helpers.js';

export { SAMPLES } from './samples.js';

export interface Rig {
  db: TestDatabase;
  clock: ManualClock;
  timers: ManualTimers;
  service: WebhookService;
  bus: EventBus;
  /** Moves the clock (and fires due request deadlines). */
  advance(ms: number): void;
  close(): Promise<void>;
}

/** A WebhookService as app.ts builds it, on a fresh database, with time under the test's control. */
export async function startRig(
  opts: { env?: Record<string, string>; service?: WebhookServiceOptions; db?: TestDatabase; clock?: ManualClock; start?: boolean } = {},
): Promise<Rig> {
  const db = opts.db ?? (await createTestDatabase());
  const clock = opts.clock ?? new ManualClock();
  const timers = new ManualTimers(clock);
  const config = loadConfig({ WEBHOOK_ALLOW_HOSTS: '127.0.0.1', ...opts.env });
  const service = new WebhookService({ config, db: db.pool, log: silentLogger, clock }, { timers, pollMs: 25, sweepMs: 0, ...opts.service });
  const bus = new EventBus({ clock, log: silentLogger });
  bus.subscribe(service.accept, service.acceptIn);
  if (opts.start !== false) await service.start();
  return {
    db,
    clock,
    timers,
    service,
    bus,
    advance: (ms) => timers.advance(ms),
    async close() {
      await service.stop();
      if (!opts.db) await db.drop();
    },
  };
}

/** The latest queue job of a delivery (a manual retry is a new job). */
export async function jobOf(rig: Pick<Rig, 'db'>, deliveryId: string) {
  const r = await rig.db.pool.query<{ id: string; state: string; run_at: Date; attempts: number }>(
    `SELECT id::text, state, run_at, attempts FROM queue_jobs WHERE queue = 'webhooks' AND convert_from(payload, 'UTF8')::jsonb->>'deliveryId' = $1 ORDER BY id DESC LIMIT 1`,
    [deliveryId],
  );
  return r.rows[0];
}

/**
 * Waits until the delivery's job is written back as `state` having consumed at least
 * `attempts` attempts (a new job is pending before its first claim), so time can move safely.
 */
export function waitForJobState(rig: Pick<Rig, 'db'>, deliveryId: string, state: string, attempts = 1) {
  return pollUntil(
    async () => {
      const j = await jobOf(rig, deliveryId);
      return j?.state === state && j.attempts >= attempts;
    },
    15_000,
    () => `job of ${deliveryId} never reached ${state} after ${attempts} attempt(s)`,
  );
}

export async function onlyDeliveryId(rig: Pick<Rig, 'db'>, webhookId: string): Promise<string> {
  return pollUntil(
    async () => (await rig.db.pool.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE webhook_id = $1', [webhookId])).rows[0]?.id,
    15_000,
    () => `no delivery for ${webhookId}`,
  );
}

export { pollUntil };
