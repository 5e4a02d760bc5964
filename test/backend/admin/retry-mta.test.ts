/**
 * `retry failed` through the real product (role all): the campaign goes backend → MTA /send
 * → delivery to a loopback SMTP sink, which rejects some recipients at RCPT with 550: a policy
 * rejection ("spam", a soft bounce reason) and a user unknown (hard). The MTA's feedback
 * fills the per-recipient record; a retry resends only the soft bounces, checked against the
 * sink's own count, and never the delivered or hard-bounced ones.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';

const KEY = 'lm_mta_retry_0123456789abcdefghijklmnopqrstuvwxyz';
const ADMIN = 'lm_admin_retry_0123456789abcdefghijklmnopqrstuvwxyz';
const N = 30;
/**
 * Recipient i: 0–1 rejected as spam (soft), 2–4 unknown user (hard), the rest accepted. Two
 * policy rejections only: from three in a row the MTA backs off the domain for minutes
 * (policy domainBackoff), which would hold the retry back rather than test it.
 */
const kind = (i: number) => (i < 2 ? 'spam' : i < 5 ? 'unknown' : 'ok');
const addr = (i: number) => `m${String(i).padStart(2, '0')}@retry.test`;
const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

describe('retry failed through the MTA to a loopback sink', () => {
  let dns: DnsServer;
  let sink: SmtpSink;
  let app: TestApp;
  let campaignId: string;
  const admin = bearerApi(() => app.backendUrl!, ADMIN);
  const mta = bearerApi(() => app.mtaUrl!, KEY);
  let rejectSpam = true;

  beforeAll(async () => {
    sink = await startSmtpSink({ host: '127.0.0.27', port: 0 });
    sink.setRcptRule((rcpt) => {
      const i = Number(/^m(\d+)@/.exec(rcpt)?.[1] ?? -1);
      if (kind(i) === 'unknown') return { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown` };
      if (kind(i) === 'spam' && rejectSpam) return { code: 550, message: '5.7.1 Message rejected as spam by content filter' };
      return undefined;
    });
    dns = await startDnsServer({
      zones: {
        'retry.test': [
          { name: '@', type: 'MX', value: '10 mx.retry.test' },
          { name: 'mx', type: 'A', value: '127.0.0.27' },
        ],
      },
    });
    app = await startTestApp({
      role: 'all',
      env: {
        ADMIN_TOKEN: ADMIN,
        MTA_API_KEY: KEY,
        BASE_URL: 'http://127.0.0.1:9',
        BOUNCE_VERP_KEY: 'retry-verp-key-0123456789abcdef',
        BOUNCE_HOST: 'bounces.sender.test',
        DNS_SERVERS: dns.servers,
        MTA_DELIVERY_PORT: String(sink.port),
        MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
        MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
        EMAIL_PROVIDER: 'mta',
      },
    });
    expect((await mta('POST', '/dkim', { domain: 'sender.test', selector: 'retry', privateKey: pem })).status).toBeLessThan(300);
    // The domain's rate is not what this test is about: without this the MTA paces the retries minutes out.
    expect((await mta('PUT', '/isp-profiles/retry.test', { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 })).status).toBeLessThan(300);
    const topic = (await admin('POST', '/admin/topics', { name: 'Retry list' })).body.data;
    const now = new Date().toISOString();
    await app.db.pool.query(
      `INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT 'ct_m' || lpad(i::text, 2, '0'), 'm' || lpad(i::text, 2, '0') || '@retry.test', 'api', $1, $1 FROM generate_series(0, $2 - 1) i`,
      [now, N],
    );
    await app.db.pool.query(
      `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) SELECT $1, 'ct_m' || lpad(i::text, 2, '0'), 'not_required', 'api', $2, $2 FROM generate_series(0, $3 - 1) i`,
      [topic.id, now, N],
    );
    const c = await admin('POST', '/admin/campaigns', { subject: 'Retry me', html: '<p>Hello</p>', from: 'News <news@sender.test>', topicId: topic.id });
    campaignId = c.body.data.id;
    expect((await admin('POST', `/admin/campaigns/${campaignId}/send`)).status).toBe(202);
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    await Promise.all([sink?.close(), dns?.stop()]);
  });

  const record = async () => (await admin('GET', `/admin/campaigns/${campaignId}/recipients?limit=100`)).body.data as { email: string; status: string; reason: string | null; smtpResponse: string | null }[];
  const accepted = (to: string) => sink.messages.filter((m) => m.rcptTo.includes(to)).length;

  it('the record shows delivered, soft- and hard-bounced recipients from the MTA', async () => {
    await pollUntil(async () => (await record()).filter((r) => ['delivered', 'bounced'].includes(r.status)).length === N, 60_000, () => 'feedback for every recipient');
    const rows = await record();
    for (let i = 0; i < N; i++) {
      const r = rows.find((x) => x.email === addr(i))!;
      if (kind(i) === 'ok') expect(r.status, r.email).toBe('delivered');
      else expect(r.status, r.email).toBe('bounced');
      if (kind(i) === 'spam') expect(r.reason).toMatch(/^soft bounce/);
      if (kind(i) === 'unknown') expect(r.reason).toBe('hard bounce: userunknown');
      if (kind(i) !== 'ok') expect(r.smtpResponse).toContain('550');
    }
    for (let i = 0; i < N; i++) expect(accepted(addr(i)), addr(i)).toBe(kind(i) === 'ok' ? 1 : 0);
  }, 90_000);

  it('retry resends only the soft bounces; the sink counts them once, and nobody else again', async () => {
    rejectSpam = false;
    const r = await admin('POST', `/admin/campaigns/${campaignId}/retry`);
    expect(r.status).toBe(202);
    expect(r.body.data.queued).toBe(2);
    expect((await admin('POST', `/admin/campaigns/${campaignId}/retry`)).body.data.queued).toBe(0);
    await sink.waitUntil(() => Array.from({ length: 2 }, (_, i) => accepted(addr(i))).every((n) => n === 1), 60_000, 'the resent messages');
    await pollUntil(async () => (await record()).filter((x) => x.status === 'delivered').length === N - 3, 60_000, () => 'the retries delivered');
    await new Promise((res) => setTimeout(res, 500)); // nothing more may arrive
    for (let i = 0; i < N; i++) expect(accepted(addr(i)), addr(i)).toBe(kind(i) === 'unknown' ? 0 : 1);
    const rows = await record();
    expect(rows.filter((x) => x.status === 'bounced').map((x) => x.email)).toEqual([2, 3, 4].map(addr));
  }, 90_000);
});
