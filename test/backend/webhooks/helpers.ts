/** Shared fixtures of the webhook tests: one realistic `data` per event, and a service on a fresh database. */
import { ManualClock } from '../../../src/shared/clock.js';
import { loadConfig } from '../../../src/shared/config.js';
import { silentLogger } from '../../../src/shared/log.js';
import { EventBus } from '../../../src/backend/events.js';
import type { WebhookEventMap, WebhookEventName } from '../../../src/backend/webhooks/catalog.js';
import { WebhookService, type WebhookServiceOptions } from '../../../src/backend/webhooks/service.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { pollUntil } from '../../harness/dns.js';
import { ManualTimers } from '../../shared/net/helpers.js';

const email = {
  emailId: 'es_01jabcd0000000000000000001',
  messageId: '<es_01jabcd0000000000000000001@mail.acme.test>',
  to: 'ada@example.com',
  from: 'Acme <news@acme.test>',
  subject: 'March product update',
  contactId: 'ct_01jabcd0000000000000000001',
  type: 'campaign' as const,
  campaignId: 'cmp_01jabcd000000000000000001',
};

export const SAMPLES: { [K in WebhookEventName]: WebhookEventMap[K] } = {
  'email.sent': { ...email, sentAt: '2026-01-01T11:59:58.120Z' },
  'email.delivered': { ...email, deliveredAt: '2026-01-01T11:59:59.003Z', smtpResponse: '250 2.0.0 OK 1735732799 q12si' },
  'email.opened': { ...email, openedAt: '2026-01-01T12:04:10.500Z', userAgent: 'Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X)' },
  'email.clicked': { ...email, clickedAt: '2026-01-01T12:04:31.007Z', url: 'https://acme.test/pricing?utm_source=lettermill', userAgent: null },
  'email.bounced': {
    ...email,
    type: 'transactional',
    campaignId: null,
    bouncedAt: '2026-01-01T12:00:02.440Z',
    bounce: { type: 'hard', reason: 'userunknown', status: '5.1.1', diagnostic: "550 5.1.1 The email account that you tried to reach does not exist" },
  },
  'email.complained': { ...email, complainedAt: '2026-01-02T08:30:00.000Z', feedbackType: 'abuse' },
  'contact.created': {
    id: 'ct_01jabcd0000000000000000001',
    email: 'ada@example.com',
    firstName: 'Ada',
    lastName: 'Lovelace',
    source: 'form',
    formId: 'frm_01jabcd00000000000000001',
    createdAt: '2026-01-01T11:00:00.000Z',
    updatedAt: '2026-01-01T11:00:00.000Z',
  },
  'topic.unsubscribed': {
    contactId: 'ct_01jabcd0000000000000000001',
    email: 'ada@example.com',
    topicId: 'tp_01jabcd000000000000000001',
    topicName: 'Product updates',
    source: 'one_click',
    emailId: email.emailId,
    campaignId: email.campaignId,
    unsubscribedAt: '2026-01-01T12:10:00.000Z',
  },
};

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
  bus.subscribe(service.accept);
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
    `SELECT id::text, state, run_at, attempts FROM queue_jobs WHERE queue = 'webhooks' AND payload->>'deliveryId' = $1 ORDER BY id DESC LIMIT 1`,
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
