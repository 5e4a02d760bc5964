/**
 * `retry failed` through the real product (role all): the campaign goes backend → MTA /send
 * → delivery to a loopback SMTP sink, which rejects some recipients at RCPT with 550: a policy
 * rejection ("spam", a soft bounce reason) and a user unknown (hard). The MTA's feedback
 * fills the per-recipient record; a retry resends only the soft bounces, checked against the
 * sink's own count, and never the delivered or hard-bounced ones.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pollUntil } from '../../harness/dns.js';
import { startProductToSink, type ProductToSink } from '../../harness/product.js';

const N = 30;
/**
 * Recipient i: 0–1 rejected as spam (soft), 2–4 unknown user (hard), the rest accepted. Two
 * policy rejections only: from three in a row the MTA backs off the domain for minutes
 * (policy domainBackoff), which would hold the retry back rather than test it.
 */
const kind = (i: number) => (i < 2 ? 'spam' : i < 5 ? 'unknown' : 'ok');
const addr = (i: number) => `m${String(i).padStart(2, '0')}@retry.test`;

describe('retry failed through the MTA to a loopback sink', () => {
  let p: ProductToSink;
  let campaignId: string;
  const admin: ProductToSink['admin'] = (...a) => p.admin(...a);
  let rejectSpam = true;

  beforeAll(async () => {
    p = await startProductToSink({ domain: 'retry.test', sinkHost: '127.0.0.27', name: 'retry' });
    p.sink.setRcptRule((rcpt) => {
      const i = Number(/^m(\d+)@/.exec(rcpt)?.[1] ?? -1);
      if (kind(i) === 'unknown') return { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown` };
      if (kind(i) === 'spam' && rejectSpam) return { code: 550, message: '5.7.1 Message rejected as spam by content filter' };
      return undefined;
    });
    const topicId = await p.topicWith('Retry list', Array.from({ length: N }, (_, i) => addr(i)));
    const c = await admin('POST', '/admin/campaigns', { subject: 'Retry me', html: '<p>Hello</p>', from: 'News <news@sender.test>', topicId });
    campaignId = c.body.data.id;
    expect((await admin('POST', `/admin/campaigns/${campaignId}/send`)).status).toBe(202);
  }, 120_000);
  afterAll(async () => {
    await p?.close();
  });

  const record = async () => (await admin('GET', `/admin/campaigns/${campaignId}/recipients?limit=100`)).body.data as { email: string; status: string; reason: string | null; smtpResponse: string | null }[];
  const accepted = (to: string) => p.sink.messages.filter((m) => m.rcptTo.includes(to)).length;

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
    await p.sink.waitUntil(() => Array.from({ length: 2 }, (_, i) => accepted(addr(i))).every((n) => n === 1), 60_000, 'the resent messages');
    await pollUntil(async () => (await record()).filter((x) => x.status === 'delivered').length === N - 3, 60_000, () => 'the retries delivered');
    await new Promise((res) => setTimeout(res, 500)); // nothing more may arrive
    for (let i = 0; i < N; i++) expect(accepted(addr(i)), addr(i)).toBe(kind(i) === 'unknown' ? 0 : 1);
    const rows = await record();
    expect(rows.filter((x) => x.status === 'bounced').map((x) => x.email)).toEqual([2, 3, 4].map(addr));
  }, 90_000);
});
