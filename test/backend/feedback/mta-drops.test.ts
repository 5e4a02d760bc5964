/**
 * The jobs the MTA drops without sending (mta.md: a suppressed recipient, a screened message)
 * reach the per-recipient record and the send's status through the MTA's `dropped` event,
 * written with the drop's delivery-log row (the outbox) and posted at once: no poll of the
 * MTA's log. Real product (role all): backend → MTA /send → pipeline → loopback sink.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerApi } from '../../harness/app.js';
import { pollUntil } from '../../harness/dns.js';
import { startProductToSink, type ProductToSink } from '../../harness/product.js';

const CONTACTS = ['ok1@drops.test', 'ok2@drops.test', 'gone@drops.test', 'hard@drops.test'];

describe('sends the MTA drops reach the record through its dropped events', () => {
  let p: ProductToSink;
  let app: ProductToSink['app'];
  let campaignId: string;
  let screenedId: string;
  const admin: ProductToSink['admin'] = (...a) => p.admin(...a);
  const mta: ProductToSink['mta'] = (...a) => p.mta(...a);
  const record = async () =>
    (await admin('GET', `/admin/campaigns/${campaignId}/recipients?limit=100`)).body.data as { email: string; status: string; reason: string | null }[];
  const logged = async (status: string) => (await mta('GET', `/delivery-logs?status=${status}&limit=100`)).body.data as { reason: string; recipient: string }[];

  beforeAll(async () => {
    p = await startProductToSink({ domain: 'drops.test', sinkHost: '127.0.0.29', name: 'drops', env: { CONTENT_URL_BLOCKLIST: 'blocked.test' } });
    app = p.app;
    // On the MTA's list only: the backend does not know these addresses are suppressed.
    expect((await mta('POST', '/suppression', { addresses: ['gone@drops.test'], reason: 'manual' })).status).toBeLessThan(300);
    expect((await mta('POST', '/suppression', { addresses: ['hard@drops.test'], reason: 'hard_bounce' })).status).toBeLessThan(300);

    const topicId = await p.topicWith('Drops', CONTACTS);
    const c = await admin('POST', '/admin/campaigns', { subject: 'Drops', html: '<p>Hello</p>', from: 'News <news@sender.test>', topicId });
    campaignId = c.body.data.id;
    expect((await admin('POST', `/admin/campaigns/${campaignId}/send`)).status).toBe(202);

    // A transactional message the MTA screens out (a link to a blocklisted domain).
    const key = (await admin('POST', '/admin/api-keys', { name: 'drops', scopes: ['transactional:send'] })).body.data.key as string;
    const t = await bearerApi(() => app.backendUrl!, key)('POST', '/api/v1/transactional', {
      to: 'ok3@drops.test',
      from: 'Shop <shop@sender.test>',
      subject: 'Your order',
      html: '<p>See <a href="https://www.blocked.test/offer">this</a></p>',
    });
    expect(t.status).toBe(202);
    screenedId = t.body.data.id;

    await p.sink.waitUntil(() => ['ok1@drops.test', 'ok2@drops.test'].every((a) => p.sink.messages.some((m) => m.rcptTo.includes(a))), 60_000, 'the deliverable recipients');
    await pollUntil(async () => (await logged('suppressed')).length === 2 && (await logged('screened')).length === 1, 60_000, () => 'the drops in the MTA log');
    await pollUntil(async () => (await record()).filter((r) => r.status === 'delivered').length === 2, 60_000, () => 'the deliveries in the record');
  }, 180_000);
  afterAll(async () => {
    await p?.close();
  });

  it('the MTA logs each drop, a suppressed one with its list reason', async () => {
    expect((await logged('suppressed')).map((r) => [r.recipient, r.reason]).sort()).toEqual([
      ['gone@drops.test', 'suppressed: manual'],
      ['hard@drops.test', 'suppressed: hard_bounce'],
    ]);
    expect((await logged('screened')).map((r) => [r.recipient, r.reason])).toEqual([['ok3@drops.test', 'blocked_url']]);
    // Nothing reached the sink for them.
    expect(p.sink.messages.filter((m) => m.rcptTo.some((r) => ['gone@drops.test', 'hard@drops.test', 'ok3@drops.test'].includes(r)))).toEqual([]);
  });

  it('the record has them (suppressed with the list reason, failed with the screening rule), each applied once from its event', async () => {
    await pollUntil(async () => (await record()).filter((r) => r.status === 'suppressed').length === 2, 10_000, () => 'the suppressed drops in the record');
    const rows = Object.fromEntries((await record()).map((r) => [r.email, r]));
    expect(rows['gone@drops.test']).toMatchObject({ status: 'suppressed', reason: 'manual' });
    expect(rows['hard@drops.test']).toMatchObject({ status: 'suppressed', reason: 'hard_bounce' });
    expect(rows['ok1@drops.test']!.status).toBe('delivered');
    const byState = (await admin('GET', `/admin/campaigns/${campaignId}/recipients?status=suppressed`)).body.data.map((r: { email: string }) => r.email).sort();
    expect(byState).toEqual(['gone@drops.test', 'hard@drops.test']);

    await pollUntil(async () => (await app.db.pool.query(`SELECT 1 FROM email_sends WHERE id = $1 AND status = 'rejected'`, [screenedId])).rows.length === 1, 10_000, () => 'the screened send rejected');
    const ev = (await app.db.pool.query(`SELECT type, detail, provider_event_id FROM feedback_events WHERE send_id = $1`, [screenedId])).rows;
    expect(ev).toMatchObject([{ type: 'rejected', detail: { rejection: { reason: 'screened: blocked_url' } } }]);
    // The event the MTA wrote with the log row, once each: no delivery-log read happened.
    const drops = (await app.db.pool.query(`SELECT type, count(*)::int AS n FROM feedback_events WHERE source = 'mta' AND type IN ('suppressed', 'rejected') GROUP BY type ORDER BY type`)).rows;
    expect(drops).toEqual([
      { type: 'rejected', n: 1 },
      { type: 'suppressed', n: 2 },
    ]);
    expect((await app.db.pool.query(`SELECT count(*)::int AS n FROM feedback_events WHERE provider_event_id LIKE 'delivery-log:%'`)).rows[0].n).toBe(0);
    // The blocklist follows the MTA's reason: a hard bounce is blocked here too, a manual entry is the MTA's own.
    const blocked = (await app.db.pool.query(`SELECT email, reason FROM suppressions WHERE email LIKE '%@drops.test' ORDER BY email`)).rows;
    expect(blocked).toEqual([{ email: 'hard@drops.test', reason: 'hard_bounce' }]);
  });

  it('a later drop reaches the record of its send within a second of its log row', async () => {
    const key = (await admin('POST', '/admin/api-keys', { name: 'later', scopes: ['transactional:send'] })).body.data.key as string;
    expect((await mta('POST', '/suppression', { addresses: ['later@drops.test'], reason: 'complaint' })).status).toBeLessThan(300);
    const t = await bearerApi(() => app.backendUrl!, key)('POST', '/api/v1/transactional', { to: 'later@drops.test', from: 'shop@sender.test', subject: 'Hi', text: 'Hello' });
    expect(t.status).toBe(202);
    await pollUntil(async () => (await app.db.pool.query(`SELECT 1 FROM email_sends WHERE id = $1 AND status = 'suppressed'`, [t.body.data.id])).rows.length === 1, 10_000, () => 'the later drop in the record');
    const lag = (
      await app.db.pool.query<{ ms: number }>(
        `SELECT extract(epoch FROM (f.received_at - l.created_at)) * 1000 AS ms
           FROM feedback_events f, mta_delivery_log l
          WHERE f.send_id = $1 AND f.type = 'suppressed' AND l.recipient = 'later@drops.test' AND l.status = 'suppressed'`,
        [t.body.data.id],
      )
    ).rows;
    expect(lag).toHaveLength(1);
    expect(Number(lag[0]!.ms)).toBeLessThan(1_000);
    expect((await logged('suppressed')).find((r) => r.recipient === 'later@drops.test')!.reason).toBe('suppressed: complaint');
    expect((await app.db.pool.query(`SELECT reason FROM suppressions WHERE email = 'later@drops.test'`)).rows).toEqual([{ reason: 'complaint' }]);
  });
});
