import { afterAll, beforeAll, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { startTestApp, type TestApp } from '../../harness/app.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { pollUntil, SAMPLES, waitForJobState } from './helpers.js';

const TOKEN = 'lm_admin_restart_test_token_0123456789';
const env = { ADMIN_TOKEN: TOKEN, WEBHOOK_ALLOW_HOSTS: '127.0.0.1' };
let db: TestDatabase;
let receiver: HttpReceiver;
const clock = new ManualClock();
const apps: TestApp[] = [];

async function start(): Promise<TestApp> {
  const app = await startTestApp({ env, role: 'backend', clock, db });
  apps.push(app);
  return app;
}

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startHttpReceiver();
});

afterAll(async () => {
  for (const a of apps) await a.close().catch(() => undefined);
  await receiver?.close();
  await db?.drop();
});

it('a restart between attempts loses nothing: the pending retry still happens, once', async () => {
  const app1 = await start();
  const created = await fetch(`${app1.backendUrl}/admin/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: `${receiver.url}/hook`, events: ['email.bounced'] }),
  });
  expect(created.status).toBe(201);
  const webhookId = ((await created.json()) as { data: { id: string } }).data.id;

  receiver.respondWith([503]);
  const t0 = clock.now();
  await app1.backend!.app.events.emit('email.bounced', SAMPLES['email.bounced']);
  await receiver.waitFor(1);
  const { rows } = await db.pool.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE webhook_id = $1', [webhookId]);
  const deliveryId = rows[0].id;
  await waitForJobState({ db }, deliveryId, 'pending', 1);
  await app1.close();

  const app2 = await start();
  clock.advance(60_000);
  const requests = await receiver.waitFor(2);
  expect(requests[1].headers['x-event-id']).toBe(requests[0].headers['x-event-id']);
  expect(Number(requests[1].headers['x-timestamp'])).toBe(Math.floor((t0 + 60_000) / 1000));
  await waitForJobState({ db }, deliveryId, 'completed', 2);
  const d = await pollUntil(
    async () => {
      const r = await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE id = $1', [deliveryId]);
      return r.rows[0].status === 'succeeded' ? r.rows[0] : null;
    },
    10_000,
    () => 'not succeeded',
  );
  expect(d.attempts).toBe(2);

  // An event emitted right before shutdown (not awaited) is written by the shutdown and delivered after the restart.
  void app2.backend!.app.events.emit('email.bounced', { ...SAMPLES['email.bounced'], emailId: 'es_last' });
  await app2.close();
  const app3 = await start();
  const third = (await receiver.waitFor(3))[2];
  expect(JSON.parse(third.rawBody.toString()).data.emailId).toBe('es_last');

  // Nothing that succeeded is sent again.
  clock.advance(10 * 60_000);
  await new Promise((r) => setTimeout(r, 1500));
  expect(receiver.requests).toHaveLength(3);
  await app3.close();
});
