import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../../docs/examples/webhook-receiver.mjs';
import { ManualClock } from '../../../src/shared/clock.js';
import { WEBHOOK_EVENTS } from '../../../src/backend/webhooks/catalog.js';
import { startTestApp, type TestApp } from '../../harness/app.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { installLoopbackGuard } from '../../shared/net/helpers.js';
import { pollUntil, SAMPLES } from './helpers.js';

const TOKEN = 'lm_admin_test_token_0123456789abcdef';
let app: TestApp;
let dns: DnsServer;
let receiver: HttpReceiver;
let guard: ReturnType<typeof installLoopbackGuard>;
const clock = new ManualClock();

async function api(method: string, path: string, body?: unknown, token: string | null = TOKEN) {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${app.backendUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, text };
}

beforeAll(async () => {
  guard = installLoopbackGuard();
  dns = await startDnsServer({
    zones: {
      'hooks.test': [
        { name: 'priv', type: 'A', value: '192.168.10.1' },
        { name: 'meta', type: 'A', value: '169.254.169.254' },
        { name: 'public', type: 'A', value: '93.184.215.14' },
      ],
    },
  });
  receiver = await startHttpReceiver();
  app = await startTestApp({ env: { ADMIN_TOKEN: TOKEN, WEBHOOK_ALLOW_HOSTS: '127.0.0.1', DNS_SERVERS: dns.servers }, role: 'backend', clock });
}, 120_000);

afterAll(async () => {
  await app?.close();
  await receiver?.close();
  await dns?.stop();
  guard.uninstall();
  expect(guard.violations).toEqual([]);
});

describe('admin auth', () => {
  it.each([
    ['no header', null],
    ['wrong token', 'lm_admin_wrong'],
    ['empty token', ''],
  ])('%s → 401 unauthenticated', async (_n, token) => {
    const res = await api('GET', '/admin/webhooks', undefined, token);
    expect(res.status).toBe(401);
    expect(res.body.error.category).toBe('unauthenticated');
  });

  it('the token without "Bearer" is refused', async () => {
    const res = await fetch(`${app.backendUrl}/admin/webhooks`, { headers: { authorization: TOKEN } });
    expect(res.status).toBe(401);
  });
});

describe('POST /admin/webhooks', () => {
  it('creates an endpoint and shows its secret once', async () => {
    const res = await api('POST', '/admin/webhooks', { url: `${receiver.url}/hook`, events: ['email.sent', 'contact.created', 'email.sent'] });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ url: `${receiver.url}/hook`, events: ['email.sent', 'contact.created'], enabled: true });
    expect(res.body.data.id).toMatch(/^wh_/);
    expect(res.body.data.secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);

    const list = await api('GET', '/admin/webhooks');
    expect(list.status).toBe(200);
    expect(list.body.data.map((w: { id: string }) => w.id)).toContain(res.body.data.id);
    expect(list.text).not.toContain('whsec_');
    const one = await api('GET', `/admin/webhooks/${res.body.data.id}`);
    expect(one.text).not.toContain('whsec_');
    await api('DELETE', `/admin/webhooks/${res.body.data.id}`);
  });

  it('accepts each of the eight event names and nothing else', async () => {
    const ok = await api('POST', '/admin/webhooks', { url: `${receiver.url}/all`, events: [...WEBHOOK_EVENTS] });
    expect(ok.status).toBe(201);
    await api('DELETE', `/admin/webhooks/${ok.body.data.id}`);
    for (const events of [['email.sent', 'email.foo'], ['*'], ['EMAIL.SENT'], ['contact.updated'], []]) {
      const res = await api('POST', '/admin/webhooks', { url: `${receiver.url}/x`, events });
      expect(res.status, JSON.stringify(events)).toBe(400);
      expect(res.body.error.category).toBe('invalid_input');
    }
    const res = await api('POST', '/admin/webhooks', { url: `${receiver.url}/x`, events: ['email.foo'] });
    expect(res.body.error.message).toContain('"email.foo"');
    expect(res.body.error.message).toContain('topic.unsubscribed');
  });

  it.each([
    ['missing url', { events: ['email.sent'] }],
    ['missing events', { url: 'https://example.com/' }],
    ['unknown field', { url: 'https://example.com/', events: ['email.sent'], secret: 'mine' }],
    ['url not a string', { url: 42, events: ['email.sent'] }],
  ])('%s → 400', async (_n, body) => {
    const res = await api('POST', '/admin/webhooks', body);
    expect(res.status).toBe(400);
    expect(res.body.error.category).toBe('invalid_input');
  });

  it.each([
    'http://10.0.0.1/hook',
    'http://172.16.0.1/',
    'http://192.168.1.1/',
    'http://169.254.169.254/latest/meta-data/',
    'http://100.64.0.1/',
    'http://[::1]/',
    'http://[fd00::1]/',
    'http://[::ffff:10.0.0.1]/',
    'http://2130706433/',
    'http://0x7f.1/',
    'http://127.1/',
    'http://localhost/',
    'http://priv.hooks.test/',
    'http://meta.hooks.test/',
    'http://missing.hooks.test/',
    'ftp://example.com/',
    'https://user:pass@public.hooks.test/',
    'not a url',
  ])('refuses %s', async (url) => {
    const res = await api('POST', '/admin/webhooks', { url, events: ['email.sent'] });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'url_not_allowed' } });
  });

  it('accepts a public host (resolved, not contacted)', async () => {
    const res = await api('POST', '/admin/webhooks', { url: 'https://public.hooks.test/hook', events: ['email.sent'] });
    expect(res.status).toBe(201);
    await api('DELETE', `/admin/webhooks/${res.body.data.id}`);
  });
});

describe('PATCH, DELETE, secret rotation', () => {
  it('disables, re-enables, changes events and URL with the same checks', async () => {
    const { body } = await api('POST', '/admin/webhooks', { url: `${receiver.url}/p`, events: ['email.sent'] });
    const id = body.data.id;
    expect((await api('PATCH', `/admin/webhooks/${id}`, { enabled: false })).body.data.enabled).toBe(false);
    const patched = await api('PATCH', `/admin/webhooks/${id}`, { enabled: true, events: ['email.opened', 'email.clicked'] });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ enabled: true, events: ['email.opened', 'email.clicked'] });
    expect(patched.text).not.toContain('whsec_');
    expect((await api('PATCH', `/admin/webhooks/${id}`, { url: 'http://10.9.9.9/' })).status).toBe(400);
    expect((await api('PATCH', `/admin/webhooks/${id}`, { events: ['nope'] })).status).toBe(400);
    expect((await api('PATCH', `/admin/webhooks/${id}`, {})).status).toBe(400);
    expect((await api('PATCH', `/admin/webhooks/wh_unknown`, { enabled: false })).status).toBe(404);

    const rotated = await api('POST', `/admin/webhooks/${id}/secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.secret).toMatch(/^whsec_/);
    expect(rotated.body.data.secret).not.toBe(body.data.secret);

    const del = await api('DELETE', `/admin/webhooks/${id}`);
    expect(del).toMatchObject({ status: 200, body: { data: { id, deleted: true } } });
    expect((await api('GET', `/admin/webhooks/${id}`)).body.error).toMatchObject({ category: 'not_found', data: { reason: 'webhook_not_found' } });
    expect((await api('DELETE', `/admin/webhooks/${id}`)).status).toBe(404);
  });
});

describe('delivery log and replay', () => {
  it('lists deliveries with status and attempts, pages through them, and replays one', async () => {
    receiver.reset();
    const { body } = await api('POST', '/admin/webhooks', { url: `${receiver.url}/log`, events: ['email.sent', 'topic.unsubscribed'] });
    const { id, secret } = body.data;
    const events = app.backend!.app.events;
    for (let i = 0; i < 3; i++) await events.emit('email.sent', { ...SAMPLES['email.sent'], emailId: `es_${i}` });
    await events.emit('email.opened', SAMPLES['email.opened']); // not subscribed
    await receiver.waitFor(3);
    await pollUntil(
      async () => (await api('GET', `/admin/webhooks/${id}/deliveries?status=succeeded`)).body.data.length === 3,
      10_000,
      () => 'deliveries never all succeeded',
    );

    const page1 = await api('GET', `/admin/webhooks/${id}/deliveries?limit=2`);
    expect(page1.status).toBe(200);
    expect(page1.body.data).toHaveLength(2);
    expect(page1.body.pagination).toMatchObject({ limit: 2, isDone: false });
    const d = page1.body.data[0];
    expect(d).toMatchObject({ webhookId: id, event: 'email.sent', status: 'succeeded', attemptCount: 1, lastStatusCode: 200 });
    expect(d.attempts[0]).toMatchObject({ attempt: 1, statusCode: 200, success: true, manual: false });
    expect(typeof d.attempts[0].durationMs).toBe('number');
    const page2 = await api('GET', `/admin/webhooks/${id}/deliveries?limit=2&cursor=${page1.body.pagination.cursor}`);
    expect(page2.body.data).toHaveLength(1);
    expect(page2.body.pagination).toEqual({ limit: 2, cursor: null, isDone: true });
    const all = [...page1.body.data, ...page2.body.data].map((x: { id: string }) => x.id);
    expect(new Set(all).size).toBe(3);

    expect((await api('GET', `/admin/webhooks/${id}/deliveries?status=failed`)).body.data).toEqual([]);
    expect((await api('GET', `/admin/webhooks/${id}/deliveries?limit=101`)).status).toBe(400);
    expect((await api('GET', `/admin/webhooks/${id}/deliveries?cursor=garbage`)).status).toBe(400);
    expect((await api('GET', `/admin/webhooks/${id}/deliveries?status=weird`)).status).toBe(400);
    expect((await api('GET', '/admin/webhooks/wh_unknown/deliveries')).status).toBe(404);

    // Replay a delivered one: same event id, new signature time.
    const retry = await api('POST', `/admin/webhook-deliveries/${d.id}/retry`);
    expect(retry).toMatchObject({ status: 202, body: { data: { id: d.id, status: 'pending' } } });
    const requests = await receiver.waitFor(4);
    const replay = requests[3];
    expect(verifyWebhook({ rawBody: replay.rawBody, signature: replay.headers['x-signature'], timestamp: replay.headers['x-timestamp'], secret, now: clock.now() }).ok).toBe(true);
    expect(replay.headers['x-event-id']).toBe(d.eventId);
    await pollUntil(async () => (await api('GET', `/admin/webhook-deliveries/${d.id}`)).body.data.attemptCount === 2, 10_000, () => 'replay not logged');
    const after = await api('GET', `/admin/webhook-deliveries/${d.id}`);
    expect(after.body.data.attempts[1]).toMatchObject({ attempt: 2, manual: true, success: true });

    expect((await api('POST', '/admin/webhook-deliveries/whd_unknown/retry')).status).toBe(404);
    expect((await api('POST', `/admin/webhook-deliveries/${d.id}/retry`, undefined, null)).status).toBe(401);

    // Deleting the endpoint deletes its log.
    await api('DELETE', `/admin/webhooks/${id}`);
    expect((await api('GET', `/admin/webhook-deliveries/${d.id}`)).status).toBe(404);
  });
});
