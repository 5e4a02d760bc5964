import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { SCHEDULE } from '../../../src/backend/campaigns/policy.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { startTestApp, type TestApp } from '../../harness/app.js';
import { ADMIN_TOKEN, call, createTopic, eventually, freePort } from '../public/helpers.js';

const MTA_OK = { status: 202, body: { data: { jobId: 'job', messageId: 'mid', status: 'queued' } } };
const MEMBERS = 25;
const HOUR = 3_600_000;

describe('scheduled campaigns on two backend instances sharing one database', () => {
  const clock = new ManualClock();
  let db: TestDatabase;
  let mta: HttpReceiver;
  let one: TestApp;
  let two: TestApp;
  let base: string;
  let topicId: string;

  const start = async () => {
    const port = await freePort();
    const env = { PORT: String(port), BASE_URL: `http://127.0.0.1:${port}`, ADMIN_TOKEN, EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'k' };
    return startTestApp({ role: 'backend', db, env, clock });
  };
  const sweeper = (a: TestApp) => a.backend!.app.campaignSchedule;
  const iso = (ms: number) => new Date(ms).toISOString();
  const draft = async (subject: string) => {
    const c = await call(base, 'POST', '/admin/campaigns', { admin: true, json: { subject, html: '<p>Hello</p>', from: 'news@acme.example', topicId } });
    expect(c.status).toBe(201);
    return c.body.data.id as string;
  };
  const get = async (id: string) => (await call(base, 'GET', `/admin/campaigns/${id}`, { admin: true })).body.data;

  beforeAll(async () => {
    db = await createTestDatabase();
    mta = await startHttpReceiver({ respond: () => MTA_OK });
    one = await start();
    two = await start();
    base = one.backendUrl!;
    topicId = (await createTopic(base, 'Weekly')).id;
    const now = iso(clock.now());
    await db.pool.query(
      `INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT 'ct_s' || lpad(i::text, 3, '0'), 's' || i || '@list.example', 'api', $1, $1 FROM generate_series(1, $2) i`,
      [now, MEMBERS],
    );
    await db.pool.query(
      `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) SELECT $1, 'ct_s' || lpad(i::text, 3, '0'), 'not_required', 'api', $2, $2 FROM generate_series(1, $3) i`,
      [topicId, now, MEMBERS],
    );
  }, 60_000);
  afterAll(async () => {
    await two?.stop();
    await one?.stop();
    await mta?.close();
    await db?.drop();
  });

  it('refuses a sendAt that is not a future instant within the limit, in the error envelope', async () => {
    const id = await draft('Validation');
    const bad = async (sendAt: unknown) => call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt } });
    for (const [sendAt, words] of [
      [iso(clock.now() - 1000), 'in the future'],
      [iso(clock.now()), 'in the future'],
      [iso(clock.now() + SCHEDULE.maxAheadMs + 60_000), 'days ahead'],
      ['2026-06-01T09:00', 'time zone'], // a bare local time: ambiguous
      ['next tuesday', 'time zone'],
      ['2026-02-30T09:00:00Z', 'time zone'],
    ] as const) {
      const r = await bad(sendAt);
      expect(r.status, sendAt).toBe(400);
      expect(r.body.error.category).toBe('invalid_input');
      expect(r.body.error.data.reason).toBe('validation_error');
      expect(r.body.error.message).toContain(words);
    }
    expect((await bad(12)).status).toBe(400);
    expect((await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: {} })).status).toBe(400);
    expect((await call(base, 'POST', '/admin/campaigns/cmp_nope/schedule', { admin: true, json: { sendAt: iso(clock.now() + HOUR) } })).status).toBe(404);
    expect((await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { json: { sendAt: iso(clock.now() + HOUR) } })).status).toBe(401);
    expect(await get(id)).toMatchObject({ status: 'draft', scheduledAt: null });
  });

  it('schedules, reschedules and cancels back to a draft; a sent campaign cannot be scheduled', async () => {
    const id = await draft('Reschedule me');
    const at = clock.now() + 2 * HOUR;
    const s = await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: new Date(at).toISOString().replace('Z', '+00:00') } });
    expect(s.status).toBe(200);
    expect(s.body.data).toMatchObject({ id, status: 'scheduled', scheduledAt: iso(at) });
    expect(await get(id)).toMatchObject({ status: 'scheduled', scheduledAt: iso(at) });
    // Another offset, same instant rules: 10:00+02:00 is 08:00Z.
    const later = clock.now() + 3 * HOUR;
    const plus2 = new Date(later + 2 * HOUR).toISOString().slice(0, 19) + '+02:00';
    expect((await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: plus2 } })).body.data.scheduledAt).toBe(iso(later));

    const cancelled = await call(base, 'DELETE', `/admin/campaigns/${id}/schedule`, { admin: true });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.data).toMatchObject({ status: 'draft', scheduledAt: null });
    const again = await call(base, 'DELETE', `/admin/campaigns/${id}/schedule`, { admin: true });
    expect(again.status).toBe(409);
    expect(again.body.error.data.reason).toBe('campaign_not_scheduled');
    expect((await call(base, 'DELETE', '/admin/campaigns/cmp_nope/schedule', { admin: true })).status).toBe(404);

    // A cancelled campaign does not start when its old time passes.
    clock.advance(4 * HOUR);
    expect([...(await sweeper(one).sweep()), ...(await sweeper(two).sweep())]).toEqual([]);
    expect((await get(id)).status).toBe('draft');

    // Send now also starts a scheduled one; after that, scheduling is a conflict.
    await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: iso(clock.now() + HOUR) } });
    const sent = await call(base, 'POST', `/admin/campaigns/${id}/send`, { admin: true });
    expect(sent.status).toBe(202);
    expect(sent.body.data).toMatchObject({ status: 'sending', recipients: MEMBERS });
    const late = await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: iso(clock.now() + HOUR) } });
    expect(late.status).toBe(409);
    expect(late.body.error.data.reason).toBe('campaign_not_schedulable');
    expect((await call(base, 'DELETE', `/admin/campaigns/${id}/schedule`, { admin: true })).status).toBe(409);
    await mta.waitFor(MEMBERS, 30_000);
    await eventually(async () => (await get(id)).status === 'sent', 30_000);
    mta.reset();
  });

  it('a due campaign starts once, not before its time, even with both instances sweeping at once', async () => {
    const id = await draft('Scheduled news');
    const at = clock.now() + HOUR;
    expect((await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: iso(at) } })).status).toBe(200);

    clock.advance(HOUR - 1000); // a second early
    expect([...(await sweeper(one).sweep()), ...(await sweeper(two).sweep())]).toEqual([]);
    expect(await get(id)).toMatchObject({ status: 'scheduled', sendStartedAt: null });
    expect(mta.requests).toHaveLength(0);

    clock.advance(1000);
    const started = (await Promise.all([sweeper(one).sweep(), sweeper(two).sweep()])).flat();
    expect(started).toEqual([id]);
    expect(await get(id)).toMatchObject({ status: 'sending', recipients: MEMBERS, sendStartedAt: iso(at), scheduledAt: iso(at) });
    await mta.waitFor(MEMBERS, 30_000);
    await eventually(async () => (await get(id)).status === 'sent', 30_000);
    expect([...(await sweeper(one).sweep()), ...(await sweeper(two).sweep())]).toEqual([]);
    await new Promise((r) => setTimeout(r, 300)); // nothing more may arrive
    const to = mta.requests.map((r) => JSON.parse(r.rawBody.toString()).to as string);
    expect(to).toHaveLength(MEMBERS);
    expect(new Set(to).size).toBe(MEMBERS);
    const archives = (await db.pool.query(`SELECT count(*)::int AS n FROM campaign_archives WHERE campaign_id = $1`, [id])).rows[0].n;
    expect(archives).toBe(1);
    // The audit log records who scheduled (the guard's hook, like every admin write).
    const audit = (await db.pool.query(`SELECT method, route FROM admin_audit_log WHERE target_id = $1 ORDER BY created_at`, [id])).rows;
    expect(audit).toContainEqual({ method: 'POST', route: '/admin/campaigns/:id/schedule' });
  });

  it("each instance's own timer starts a due campaign without being asked", async () => {
    mta.reset();
    const id = await draft('Timer');
    const at = clock.now() + HOUR;
    await call(base, 'POST', `/admin/campaigns/${id}/schedule`, { admin: true, json: { sendAt: iso(at) } });
    clock.advance(HOUR);
    await eventually(async () => (await get(id)).status === 'sent', SCHEDULE.sweepMs * 2 + 20_000);
    expect((await get(id)).sendStartedAt).toBe(iso(at));
    await new Promise((r) => setTimeout(r, 300));
    expect(new Set(mta.requests.map((r) => JSON.parse(r.rawBody.toString()).to)).size).toBe(MEMBERS);
    expect(mta.requests).toHaveLength(MEMBERS);
  }, 60_000);
});
