/**
 * The jobs the MTA drops without an event (mta.md: a suppressed recipient, a screened
 * message) reach the per-recipient record and the send's status through the MTA's delivery
 * log, read by the backend's reconciler (src/backend/feedback/mta-drops.ts). Real product
 * (role all): backend → MTA /send → pipeline → delivery to a loopback sink.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerApi } from '../../harness/app.js';
import { pollUntil } from '../../harness/dns.js';
import { startProductToSink, type ProductToSink } from '../../harness/product.js';
import { MtaDropReconciler } from '../../../src/backend/feedback/mta-drops.js';
import { MTA_DROPS } from '../../../src/backend/feedback/policy.js';
import { EventBus } from '../../../src/backend/events.js';

const CONTACTS = ['ok1@drops.test', 'ok2@drops.test', 'gone@drops.test', 'hard@drops.test'];

describe('sends the MTA drops silently reach the record', () => {
  let p: ProductToSink;
  let app: ProductToSink['app'];
  let campaignId: string;
  let screenedId: string;
  const admin: ProductToSink['admin'] = (...a) => p.admin(...a);
  const mta: ProductToSink['mta'] = (...a) => p.mta(...a);
  const drops = () => app.backend!.app.mtaDrops!;
  /** Another reconciler on the same store and coordination (a second instance), reading the MTA at `mtaUrl`. */
  const reconciler = (mtaUrl: string) => {
    const s = app.services;
    const events = new EventBus({ clock: s.clock, log: s.log });
    return new MtaDropReconciler({ db: s.db, clock: s.clock, log: s.log, events, coord: s.coord, mtaUrl, apiKey: s.config.MTA_API_KEY!, organizationId: s.config.ORGANIZATION_ID });
  };
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
    // Nothing reached the sink for them, and no event moved their sends.
    expect(p.sink.messages.filter((m) => m.rcptTo.some((r) => ['gone@drops.test', 'hard@drops.test', 'ok3@drops.test'].includes(r)))).toEqual([]);
    const before = Object.fromEntries((await record()).map((r) => [r.email, r.status]));
    expect(before['gone@drops.test']).toBe('sent');
    expect(before['hard@drops.test']).toBe('sent');
  });

  it('a sweep puts them in the record (suppressed, failed with the screening rule); a second applies nothing', async () => {
    expect(await drops().sweep()).toBe(3);
    const rows = Object.fromEntries((await record()).map((r) => [r.email, r]));
    expect(rows['gone@drops.test']).toMatchObject({ status: 'suppressed', reason: 'manual' });
    expect(rows['hard@drops.test']).toMatchObject({ status: 'suppressed', reason: 'hard_bounce' });
    expect(rows['ok1@drops.test']!.status).toBe('delivered');
    const byState = (await admin('GET', `/admin/campaigns/${campaignId}/recipients?status=suppressed`)).body.data.map((r: { email: string }) => r.email).sort();
    expect(byState).toEqual(['gone@drops.test', 'hard@drops.test']);

    const sends = (await app.db.pool.query(`SELECT to_email, status FROM email_sends ORDER BY to_email`)).rows;
    expect(sends.find((s) => s.to_email === 'ok3@drops.test')).toEqual({ to_email: 'ok3@drops.test', status: 'rejected' });
    const ev = (await app.db.pool.query(`SELECT type, detail FROM feedback_events WHERE send_id = $1`, [screenedId])).rows;
    expect(ev).toMatchObject([{ type: 'rejected', detail: { rejection: { reason: 'screened: blocked_url' } } }]);
    // The blocklist follows the MTA's reason: a hard bounce is blocked here too, a manual entry is the MTA's own.
    const blocked = (await app.db.pool.query(`SELECT email, reason FROM suppressions WHERE email LIKE '%@drops.test' ORDER BY email`)).rows;
    expect(blocked).toEqual([{ email: 'hard@drops.test', reason: 'hard_bounce' }]);

    expect(await drops().sweep()).toBe(0);
  });

  it('a reconciler that is new (a restart, a take-over) reads the look-back window and applies nothing twice', async () => {
    const s = app.services;
    const fresh = reconciler(app.mtaUrl!);
    try {
      // The running instance holds the lease for a sweep period: the newcomer stands aside.
      expect(await fresh.sweep()).toBe(0);
      expect(await s.coord.leaseHolder('backend:leader:mta-drops')).not.toBeNull();
      await s.coord.releaseLease('backend:leader:mta-drops', (await s.coord.leaseHolder('backend:leader:mta-drops'))!);
      const seen = (await app.db.pool.query(`SELECT count(*)::int AS n FROM feedback_events WHERE provider_event_id LIKE 'delivery-log:%'`)).rows[0].n;
      expect(seen).toBe(3);
      expect(await fresh.sweep()).toBe(0);
      expect((await app.db.pool.query(`SELECT count(*)::int AS n FROM feedback_events WHERE provider_event_id LIKE 'delivery-log:%'`)).rows[0].n).toBe(3);
      expect(await s.coord.leaseHolder('backend:leader:mta-drops')).not.toBeNull();
    } finally {
      await fresh.stop();
    }
    // A stopping instance gives the lease up.
    expect(await s.coord.leaseHolder('backend:leader:mta-drops')).toBeNull();
    expect(MTA_DROPS.lookbackMs).toBeGreaterThan(MTA_DROPS.sweepEveryMs);
  });

  it('a later drop is applied by the next sweep; an unreachable MTA, or a page off the contract, fails the sweep and writes nothing', async () => {
    const key = (await admin('POST', '/admin/api-keys', { name: 'later', scopes: ['transactional:send'] })).body.data.key as string;
    expect((await mta('POST', '/suppression', { addresses: ['later@drops.test'], reason: 'complaint' })).status).toBeLessThan(300);
    const t = await bearerApi(() => app.backendUrl!, key)('POST', '/api/v1/transactional', { to: 'later@drops.test', from: 'shop@sender.test', subject: 'Hi', text: 'Hello' });
    expect(t.status).toBe(202);
    await pollUntil(async () => (await logged('suppressed')).length === 3, 60_000, () => 'the later drop in the MTA log');

    const down = reconciler('http://127.0.0.1:9');
    await expect(down.sweep()).rejects.toThrow();
    await down.stop(); // releases the lease it took
    expect((await app.db.pool.query(`SELECT status FROM email_sends WHERE id = $1`, [t.body.data.id])).rows[0].status).toBe('accepted');

    // An answer off the contract (a row without its fields) fails the sweep too, before anything is applied.
    const row = (await logged('suppressed'))[0]!;
    const odd = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ ...row, status: undefined }], nextCursor: null })));
    await new Promise<void>((r) => odd.listen(0, '127.0.0.1', r));
    try {
      const off = reconciler(`http://127.0.0.1:${(odd.address() as AddressInfo).port}`);
      await expect(off.sweep()).rejects.toThrow(/off the contract: \/data\/0\/status/);
      await off.stop();
    } finally {
      await new Promise((r) => odd.close(r));
    }
    expect((await app.db.pool.query(`SELECT status FROM email_sends WHERE id = $1`, [t.body.data.id])).rows[0].status).toBe('accepted');

    expect(await drops().sweep()).toBe(1);
    expect((await app.db.pool.query(`SELECT status FROM email_sends WHERE id = $1`, [t.body.data.id])).rows[0].status).toBe('suppressed');
    expect((await app.db.pool.query(`SELECT reason FROM suppressions WHERE email = 'later@drops.test'`)).rows).toEqual([{ reason: 'complaint' }]);
  }, 90_000);
});
