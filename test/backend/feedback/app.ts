/**
 * The backend's feedback plugin on a real HTTP port against a fresh migrated database, with
 * the real EventBus (emitted events recorded by a subscribed sink) and a captured log.
 */
import { Writable } from 'node:stream';
import { EventBus, type EmittedEvent } from '../../../src/backend/events.js';
import { registerFeedback } from '../../../src/backend/feedback/index.js';
import type { WebhookOptions } from '../../../src/backend/feedback/routes.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { loadConfig } from '../../../src/shared/config.js';
import { MemoryCoordination } from '../../../src/shared/coord/memory.js';
import { boundPort, createHttpApp, type HttpApp } from '../../../src/shared/http.js';
import { createLogger } from '../../../src/shared/log.js';
import type { Services } from '../../../src/shared/services.js';
import type { TestDatabase } from '../../harness/db.js';
import { WebhookService } from '../../../src/backend/webhooks/service.js';

export const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
export const NOW_S = NOW / 1000;
export const ADMIN_TOKEN = 'admin-token-for-feedback-tests-0123456789';

export const SECRETS = {
  MTA_WEBHOOK_SECRET: 'mta-webhook-secret-0123456789abcdef',
  RELAY_WEBHOOK_SECRET: 'relay-webhook-secret-0123456789abcdef',
  RESEND_WEBHOOK_SECRET: 'whsec_' + Buffer.from('resend-key-0123456789abcdef0123').toString('base64'),
  MANDRILL_WEBHOOK_KEY: 'mandrill-key-0123456789',
};

export interface FeedbackApp {
  url: string;
  app: HttpApp;
  clock: ManualClock;
  emitted: EmittedEvent[];
  logs: { level: number; msg: string; [k: string]: unknown }[];
  webhooks?: WebhookService;
  close(): Promise<void>;
}

export async function startFeedbackApp(
  db: TestDatabase,
  opts: {
    env?: Record<string, string>;
    webhook?: WebhookOptions;
    clock?: ManualClock;
    /** Also run the real outbound customer webhooks (issue 5) on the same bus, as app.ts does. */
    customerWebhooks?: boolean;
  } = {},
): Promise<FeedbackApp> {
  const clock = opts.clock ?? new ManualClock(NOW);
  const config = loadConfig({ NODE_ENV: 'test', BASE_URL: 'http://lettermill.test', ADMIN_TOKEN, ...opts.env });
  const logs: FeedbackApp['logs'] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const line of chunk.toString().split('\n')) if (line) logs.push(JSON.parse(line));
      cb();
    },
  });
  const log = createLogger({ level: 'info', destination: sink });
  const services: Services = { config, log, db: db.pool, coord: new MemoryCoordination({ clock }), clock };
  const app = createHttpApp({ log });
  const bus = new EventBus({ clock, log });
  const emitted: EmittedEvent[] = [];
  bus.subscribe((e) => {
    emitted.push(e);
  });
  app.decorate('events', bus);
  let webhooks: WebhookService | undefined;
  if (opts.customerWebhooks) {
    webhooks = new WebhookService(services, { pollMs: 25, sweepMs: 0 });
    bus.subscribe(webhooks.accept, webhooks.acceptIn);
    await webhooks.start();
  }
  registerFeedback(app, services, bus, opts.webhook);
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url: `http://127.0.0.1:${boundPort(app)}`,
    app,
    clock,
    emitted,
    logs,
    webhooks,
    async close() {
      await app.close();
      await webhooks?.stop();
    },
  };
}

/** Row counts of every table feedback writes: equal before and after means "no state change". */
export async function feedbackState(db: TestDatabase): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of ['feedback_events', 'suppressions', 'contact_activity', 'feedback_inbox', 'feedback_mta_events', 'campaign_sending_pauses']) {
    out[t] = Number((await db.pool.query(`SELECT count(*) AS n FROM ${t}`)).rows[0].n);
  }
  return out;
}
