import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { Queue } from '../../../src/shared/queue/queue.js';
import { CAMPAIGN_QUEUE } from '../../../src/backend/campaigns/policy.js';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../../harness/http-receiver.js';
import { createTestDatabase } from '../../harness/db.js';
import { startTestApp } from '../../harness/app.js';
import { ADMIN_TOKEN, call, createTopic, eventually, freePort, membership, startBackend, type Backend } from '../public/helpers.js';

const MTA_OK = { status: 202, body: { data: { jobId: 'job', messageId: 'mid', status: 'queued' } } };
const jobsOf = (reqs: RecordedRequest[]) => reqs.map((r) => JSON.parse(r.rawBody.toString()));
const sentEvents = (b: Backend, campaignId: string) => b.events.filter((e) => e.name === 'email.sent' && (e.data as { campaignId: string }).campaignId === campaignId);

const HTML = `<!doctype html><html><body>
<h1>Spring sale</h1>
<p><a href="https://shop.acme.example/sale?x=1&amp;y=2">See the sale</a> and <a class="btn" href='https://acme.example/blog'>our blog</a>.</p>
<p><a href="mailto:help@acme.example">Write to us</a> · <a href="#top">Top</a></p>
</body></html>`;

/** 1,000 contacts on the topic, every 10 in the same pattern: see `kind`. */
async function seedMembers(pool: any, topicId: string, otherTopicId: string, n: number, nowIso: string, prefix = 'm'): Promise<void> {
  await pool.query(
    `INSERT INTO contacts (id, email, first_name, source, created_at, updated_at)
     SELECT 'ct_${prefix}' || lpad(i::text, 5, '0'), '${prefix}' || i || '@list.example', 'Member ' || i, 'api', $1, $1 FROM generate_series(1, $2) i`,
    [nowIso, n],
  );
  await pool.query(
    `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, unsubscribed_at, created_at, updated_at)
     SELECT $1, 'ct_${prefix}' || lpad(i::text, 5, '0'),
            CASE i % 10 WHEN 0 THEN 'pending' WHEN 3 THEN 'confirmed' ELSE 'not_required' END, 'api',
            CASE WHEN i % 10 = 1 THEN $2::timestamptz END, $2, $2
       FROM generate_series(1, $3) i`,
    [topicId, nowIso, n],
  );
  // Suppressed addresses (hard bounces, complaints), stored lower-case; a few members of another topic only.
  await pool.query(
    `INSERT INTO suppressions (email, reason, source, created_at) SELECT '${prefix}' || i || '@list.example', 'hard_bounce', 'test', $1 FROM generate_series(1, $2) i WHERE i % 10 = 2`,
    [nowIso, n],
  );
  await pool.query(
    `INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT 'ct_${prefix}x' || i, '${prefix}x' || i || '@list.example', 'api', $1, $1 FROM generate_series(1, 20) i`,
    [nowIso],
  );
  await pool.query(
    `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) SELECT $1, 'ct_${prefix}x' || i, 'not_required', 'api', $2, $2 FROM generate_series(1, 20) i`,
    [otherTopicId, nowIso],
  );
}
const eligibleEmails = (n: number, prefix = 'm') =>
  Array.from({ length: n }, (_, k) => k + 1)
    .filter((i) => ![0, 1, 2].includes(i % 10))
    .map((i) => `${prefix}${i}@list.example`);

describe('campaign to a topic of 1,000 members', () => {
  const clock = new ManualClock();
  let b: Backend;
  let mta: HttpReceiver;
  let topic: { id: string; name: string };
  let campaignId: string;
  let archiveToken: string;
  let jobs: any[];

  beforeAll(async () => {
    mta = await startHttpReceiver({ respond: () => MTA_OK });
    b = await startBackend({ clock, env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'mta-key-123', PUBLIC_RATE_LIMITS: 'unsubscribe=1000/1000,tracking=100000/100000' } });
    topic = await createTopic(b.url, 'Acme Weekly');
    const other = await createTopic(b.url, 'Other list');
    await seedMembers(b.app.db.pool, topic.id, other.id, 1000, new Date(clock.now()).toISOString());
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await mta?.close();
  });

  it('validates campaigns and refuses to send twice', async () => {
    expect((await call(b.url, 'POST', '/admin/campaigns', { json: { subject: 's', html: 'h', from: 'a@b.example', topicId: topic.id } })).status).toBe(401);
    const badFrom = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 's', html: 'h', from: 'not an address', topicId: topic.id } });
    expect(badFrom.status).toBe(400);
    const badTopic = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 's', html: 'h', from: 'a@b.example', topicId: 'tp_nope' } });
    expect(badTopic.body.error.data.reason).toBe('validation_error');
    expect((await call(b.url, 'POST', '/admin/campaigns/cmp_nope/send', { admin: true })).status).toBe(404);
  });

  it('sends exactly to the eligible members, through the MTA with ipPool campaign', async () => {
    const created = await call(b.url, 'POST', '/admin/campaigns', {
      admin: true,
      json: { name: 'Spring', subject: 'Spring sale is on', html: HTML, text: 'Spring sale: https://shop.acme.example/sale', from: 'Acme News <news@acme.example>', topicId: topic.id },
    });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ status: 'draft', topicId: topic.id, from: 'Acme News <news@acme.example>' });
    campaignId = created.body.data.id;

    const sent = await call(b.url, 'POST', `/admin/campaigns/${campaignId}/send`, { admin: true });
    expect(sent.status).toBe(202);
    expect(sent.body.data).toMatchObject({ id: campaignId, status: 'sending', recipients: 700 });
    archiveToken = sent.body.data.archiveToken;
    expect(archiveToken).toMatch(/^[A-Za-z0-9]{24}$/);
    const twice = await call(b.url, 'POST', `/admin/campaigns/${campaignId}/send`, { admin: true });
    expect(twice.status).toBe(409);

    jobs = jobsOf(await mta.waitFor(700, 60_000));
    await eventually(async () => (await call(b.url, 'GET', `/admin/campaigns/${campaignId}`, { admin: true })).body.data.status === 'sent', 30_000);
    await new Promise((r) => setTimeout(r, 300)); // nothing more may arrive
    jobs = jobsOf(mta.requests);
    expect(jobs).toHaveLength(700);
    expect(new Set(jobs.map((j) => j.messageId)).size).toBe(700);
    expect(jobs.map((j) => j.to).sort()).toEqual(eligibleEmails(1000).sort());
    expect(mta.requests[0]!.headers.authorization).toBe('Bearer mta-key-123');
    for (const j of jobs) {
      expect(j).toMatchObject({ from: 'Acme News <news@acme.example>', subject: 'Spring sale is on', ipPool: 'campaign', organizationId: 'default', dkimDomain: 'acme.example', campaignId });
      expect(j).not.toHaveProperty('engagementScore'); // no history yet: unknown, omitted
    }
    const view = await call(b.url, 'GET', `/admin/campaigns/${campaignId}`, { admin: true });
    expect(view.body.data).toMatchObject({ status: 'sent', recipients: 700, progress: { handedOver: 700, inFlight: 0, failed: 0, byStatus: { accepted: 700 } } });
    const rows = (await b.app.db.pool.query(`SELECT status, count(*)::int AS n FROM email_sends WHERE campaign_id = $1 GROUP BY status`, [campaignId])).rows;
    expect(rows).toEqual([{ status: 'accepted', n: 700 }]);

    // One email.sent per recipient handed over, naming its send.
    const handed = sentEvents(b, campaignId);
    expect(handed).toHaveLength(700);
    expect(new Set(handed.map((e) => (e.data as { emailId: string }).emailId))).toEqual(new Set(jobs.map((j) => j.messageId)));
    const m3 = jobs.find((j) => j.to === 'm3@list.example');
    expect(handed.find((e) => (e.data as { emailId: string }).emailId === m3.messageId)!.data).toEqual({
      emailId: m3.messageId,
      // The Message-ID the MTA writes (sha256 of organization and job id, at the DKIM domain), recorded for reply linking.
      messageId: `<${createHash('sha256').update(`default\0${m3.messageId}`).digest('base64url').slice(0, 26)}@acme.example>`,
      to: 'm3@list.example',
      from: 'news@acme.example',
      subject: 'Spring sale is on',
      contactId: 'ct_m00003',
      type: 'campaign',
      campaignId,
      sentAt: new Date(clock.now()).toISOString(),
    });
  });

  it('handed over again under the same send ids (a replay from the cursor), it emits no second email.sent', async () => {
    await b.app.db.pool.query(`UPDATE campaigns SET status = 'sending', cursor_contact = NULL WHERE id = $1`, [campaignId]);
    await new Queue({ db: b.app.db.pool, clock, options: CAMPAIGN_QUEUE }).enqueue({ groupKey: `campaign:${campaignId}`, payload: { campaignId } });
    await mta.waitFor(1400, 60_000);
    await eventually(async () => (await b.app.db.pool.query(`SELECT status FROM campaigns WHERE id = $1`, [campaignId])).rows[0].status === 'sent', 30_000);
    expect(new Set(jobsOf(mta.requests.slice(700)).map((j) => j.messageId))).toEqual(new Set(jobs.map((j) => j.messageId)));
    expect(sentEvents(b, campaignId)).toHaveLength(700);
    const rows = (await b.app.db.pool.query(`SELECT status, count(*)::int AS n FROM email_sends WHERE campaign_id = $1 GROUP BY status`, [campaignId])).rows;
    expect(rows).toEqual([{ status: 'accepted', n: 700 }]);
  });

  it('each message has the pixel, rewritten links, both List-Unsubscribe headers, unsubscribe, preference and archive links', async () => {
    for (const j of jobs) {
      const id = j.messageId as string;
      expect(j.headers['List-Unsubscribe']).toMatch(new RegExp(`^<${b.url}/unsub/[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+>$`));
      expect(j.headers['List-Unsubscribe-Post']).toBe('List-Unsubscribe=One-Click');
      expect(j.headers['List-Id']).toContain('Acme Weekly');
      expect(j.html).toContain(`<img src="${b.url}/t/o/${id}" width="1" height="1"`);
      const hrefs = [...(j.html as string).matchAll(/href=["']([^"']+)["']/g)].map((m) => m[1]!);
      const tracked = hrefs.filter((h) => h.startsWith(`${b.url}/t/c/${id}/`));
      expect(tracked).toHaveLength(2);
      expect(hrefs).not.toContain('https://acme.example/blog');
      expect(hrefs).toContain('mailto:help@acme.example');
      expect(hrefs).toContain('#top');
      expect(hrefs).toContain(`${b.url}/archive/${archiveToken}`);
      expect(hrefs.some((h) => h.startsWith(`${b.url}/unsub/`))).toBe(true);
      expect(hrefs.some((h) => h.startsWith(`${b.url}/prefs/`))).toBe(true);
      expect(j.html).toContain('>Unsubscribe</a>');
      expect(j.text).toContain(`View in browser: ${b.url}/archive/${archiveToken}`);
      expect(j.text).toMatch(/Unsubscribe: http:\/\/127\.0\.0\.1:\d+\/unsub\//);
    }
    // The rewritten links redirect to the original targets.
    const j = jobs[0];
    const [sale, blog] = [...(j.html as string).matchAll(new RegExp(`href=["'](${b.url}/t/c/[^"']+)["']`, 'g'))].map((m) => m[1]!);
    const r1 = await fetch(sale!, { redirect: 'manual' });
    expect(r1.status).toBe(302);
    expect(r1.headers.get('location')).toBe('https://shop.acme.example/sale?x=1&y=2');
    expect((await fetch(blog!, { redirect: 'manual' })).headers.get('location')).toBe('https://acme.example/blog');
  });

  it('the archive holds the HTML as sent, without anything personal', async () => {
    const r = await call(b.url, 'GET', `/archive/${archiveToken}`);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ subject: 'Spring sale is on', organizationName: 'Acme Newsletters', sentAt: clock.now() });
    expect(r.body.data.html).toContain('https://shop.acme.example/sale?x=1&amp;y=2');
    expect(r.body.data.html).toContain('<h1>Spring sale</h1>');
    expect(r.body.data.html).not.toContain('/t/o/');
    expect(r.body.data.html).not.toContain('/unsub/');
  });

  it('a one-click POST to the captured List-Unsubscribe URL unsubscribes that member', async () => {
    const j = jobs.find((x) => x.to === 'm4@list.example');
    const url = /^<(.+)>$/.exec(j.headers['List-Unsubscribe'])![1]!;
    const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'List-Unsubscribe=One-Click' });
    expect(r.status).toBe(200);
    expect((await membership(b.app.db.pool, 'ct_m00004', topic.id))!.unsubscribed_at).not.toBeNull();
    const ev = b.events.find((e) => e.name === 'topic.unsubscribed' && (e.data as any).contactId === 'ct_m00004');
    expect(ev!.data).toMatchObject({ source: 'one_click', campaignId, emailId: j.messageId, topicId: topic.id });
  });

  it('the next campaign carries engagement scores from opens and clicks, and skips who left meanwhile', async () => {
    clock.advance(3_600_000);
    const human = { 'user-agent': 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148' };
    const byTo = new Map(jobs.map((j) => [j.to, j]));
    // m5 opened and clicked, m6 opened, m7 only had an Apple MPP prefetch.
    await fetch(`${b.url}/t/o/${byTo.get('m5@list.example').messageId}`, { headers: human });
    const click = [...(byTo.get('m5@list.example').html as string).matchAll(/href="([^"]*\/t\/c\/[^"]+)"/g)][0]![1]!;
    await fetch(click, { headers: human, redirect: 'manual' });
    await fetch(`${b.url}/t/o/${byTo.get('m6@list.example').messageId}`, { headers: human });
    await fetch(`${b.url}/t/o/${byTo.get('m7@list.example').messageId}`, { headers: { 'user-agent': 'Mozilla/5.0' } });
    await eventually(async () => {
      const r = await b.app.db.pool.query(`SELECT count(*)::int AS n FROM email_engagement WHERE campaign_id = $1 AND opens > 0`, [campaignId]);
      return r.rows[0].n === 3;
    });
    // A new member (no history) and one suppressed after the first campaign.
    const now = new Date(clock.now()).toISOString();
    await b.app.db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ('ct_new', 'new@list.example', 'api', $1, $1)`, [now]);
    await b.app.db.pool.query(`INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) VALUES ($1, 'ct_new', 'not_required', 'api', $2, $2)`, [topic.id, now]);
    await b.app.db.pool.query(`INSERT INTO suppressions (email, reason, source, created_at) VALUES ('m8@list.example', 'complaint', 'test', $1)`, [now]);

    mta.reset();
    const c2 = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 'Second', html: '<p>Hi again <a href="https://acme.example/x">x</a></p>', from: 'news@acme.example', topicId: topic.id } });
    const s2 = await call(b.url, 'POST', `/admin/campaigns/${c2.body.data.id}/send`, { admin: true });
    expect(s2.body.data.recipients).toBe(699); // 700 − m4 (unsubscribed) − m8 (suppressed) + new
    const second = jobsOf(await mta.waitFor(699, 60_000));
    const score = (to: string) => second.find((j) => j.to === to)?.engagementScore;
    expect(score('m5@list.example')).toBe(100); // opened (0.6) and clicked (0.4 at a 1/1 click rate)
    expect(score('m6@list.example')).toBe(60);
    expect(score('m7@list.example')).toBe(0); // machine open only: known, cold
    expect(score('m9@list.example')).toBe(0);
    expect(second.find((j) => j.to === 'new@list.example')).not.toHaveProperty('engagementScore');
    expect(second.find((j) => j.to === 'm4@list.example')).toBeUndefined();
    expect(second.find((j) => j.to === 'm8@list.example')).toBeUndefined();
    expect(second.find((j) => j.to === 'm10@list.example')).toBeUndefined(); // pending DOI
    await eventually(async () => sentEvents(b, c2.body.data.id).length === 699);
  });
});

describe('campaign sending rules', () => {
  it('no provider: 503 and the campaign stays a draft; paused by the circuit breaker: waits, then resumes', async () => {
    const clock = new ManualClock();
    const mta = await startHttpReceiver({ respond: () => MTA_OK });
    const none = await startBackend({ clock });
    try {
      const t = await createTopic(none.url, 'T');
      const c = await call(none.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 's', html: '<p>h</p>', from: 'a@acme.example', topicId: t.id } });
      const r = await call(none.url, 'POST', `/admin/campaigns/${c.body.data.id}/send`, { admin: true });
      expect(r.status).toBe(503);
      expect(r.body.error.data.reason).toBe('no_provider');
      expect((await call(none.url, 'GET', `/admin/campaigns/${c.body.data.id}`, { admin: true })).body.data.status).toBe('draft');
    } finally {
      await none.close();
    }
    const b = await startBackend({ clock, env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'k' } });
    try {
      const t = await createTopic(b.url, 'T');
      const at = new Date(clock.now()).toISOString();
      await b.app.db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ('ct_1', 'one@list.example', 'api', $1, $1)`, [at]);
      await b.app.db.pool.query(`INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) VALUES ($1, 'ct_1', 'confirmed', 'api', $2, $2)`, [t.id, at]);
      await b.app.db.pool.query(`INSERT INTO campaign_sending_pauses (id, organization_id, reason, paused_at) VALUES ('p1', 'default', 'bounce rate', $1)`, [at]);
      const c = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 's', html: '<p>h</p>', from: 'a@acme.example', topicId: t.id } });
      expect((await call(b.url, 'POST', `/admin/campaigns/${c.body.data.id}/send`, { admin: true })).status).toBe(202);
      await new Promise((r) => setTimeout(r, 1500));
      expect(mta.requests).toHaveLength(0);
      await b.app.db.pool.query(`UPDATE campaign_sending_pauses SET resumed_at = $1`, [at]);
      clock.advance(31_000); // the deferred job becomes due
      await mta.waitFor(1, 15_000);
      expect(JSON.parse(mta.requests[0]!.rawBody.toString()).to).toBe('one@list.example');
    } finally {
      await b.close();
      await mta.close();
    }
  });

  it('a refused message is recorded as failed; the MTA being down is retried later without losing anyone', async () => {
    const clock = new ManualClock();
    let down = true;
    const mta = await startHttpReceiver({
      respond: (req) => {
        if (down) return 503;
        return JSON.parse(req.rawBody.toString()).to === 'bad@list.example' ? { status: 400, body: { error: { message: 'invalid recipient', category: 'invalid_input' } } } : MTA_OK;
      },
    });
    const b = await startBackend({ clock, env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'k' } });
    try {
      const t = await createTopic(b.url, 'T');
      const at = new Date(clock.now()).toISOString();
      for (const [id, email] of [['ct_a', 'a@list.example'], ['ct_b', 'bad@list.example'], ['ct_c', 'c@list.example']]) {
        await b.app.db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ($1, $2, 'api', $3, $3)`, [id, email, at]);
        await b.app.db.pool.query(`INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) VALUES ($1, $2, 'confirmed', 'api', $3, $3)`, [t.id, id, at]);
      }
      const c = await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { subject: 's', html: '<p>h</p>', from: 'a@acme.example', topicId: t.id } });
      const id = c.body.data.id;
      await call(b.url, 'POST', `/admin/campaigns/${id}/send`, { admin: true });
      await mta.waitFor(3, 15_000); // first attempt: 503 for all
      await eventually(async () => (await b.app.db.pool.query(`SELECT attempts FROM queue_jobs WHERE queue = 'campaigns'`)).rows[0]?.attempts === 1 && (await b.app.db.pool.query(`SELECT state FROM queue_jobs WHERE queue = 'campaigns'`)).rows[0].state === 'pending');
      expect((await call(b.url, 'GET', `/admin/campaigns/${id}`, { admin: true })).body.data.progress).toMatchObject({ handedOver: 0, inFlight: 3, failed: 0 });
      down = false;
      clock.advance(5_000); // the retry backoff
      await eventually(async () => (await call(b.url, 'GET', `/admin/campaigns/${id}`, { admin: true })).body.data.status === 'sent', 15_000);
      const v = (await call(b.url, 'GET', `/admin/campaigns/${id}`, { admin: true })).body.data;
      expect(v.progress).toEqual({ handedOver: 2, inFlight: 0, failed: 1, byStatus: { accepted: 2, failed: 1 } });
      const failed = (await b.app.db.pool.query(`SELECT status, error FROM email_sends WHERE to_email = 'bad@list.example'`)).rows[0];
      expect(failed.status).toBe('failed');
      expect(failed.error).toContain('invalid recipient');
      // email.sent for the two the MTA accepted (once each, after the retry), none for the refused one.
      expect(sentEvents(b, id).map((e) => (e.data as { to: string }).to).sort()).toEqual(['a@list.example', 'c@list.example']);
      // Same message ids on the retry (the MTA de-duplicates on them).
      const ids = jobsOf(mta.requests).filter((j) => j.to === 'a@list.example').map((j) => j.messageId);
      expect(ids).toHaveLength(2);
      expect(ids[0]).toBe(ids[1]);
    } finally {
      await b.close();
      await mta.close();
    }
  });
});

describe('restart in the middle of a campaign', () => {
  it('a clean stop and a new instance neither lose nor duplicate recipients', async () => {
    const db = await createTestDatabase();
    const mta = await startHttpReceiver({ respond: () => ({ ...MTA_OK, delayMs: 50 }) });
    const port = await freePort();
    const env = {
      PORT: String(port),
      BASE_URL: `http://127.0.0.1:${port}`,
      ADMIN_TOKEN,
      EMAIL_PROVIDER: 'mta',
      MTA_URL: mta.url,
      MTA_API_KEY: 'k',
    };
    let app = await startTestApp({ role: 'backend', db, env });
    try {
      const base = app.backendUrl!;
      const t = await createTopic(base, 'Big list');
      const o = await createTopic(base, 'Other');
      await seedMembers(db.pool, t.id, o.id, 3000, new Date().toISOString(), 'r');
      const c = await call(base, 'POST', '/admin/campaigns', { admin: true, json: { subject: 'Restart me', html: '<p><a href="https://acme.example/">x</a></p>', from: 'news@acme.example', topicId: t.id } });
      const sent = await call(base, 'POST', `/admin/campaigns/${c.body.data.id}/send`, { admin: true });
      expect(sent.body.data.recipients).toBe(2100);
      await mta.waitFor(300, 30_000);
      await app.stop(); // SIGTERM path: the HTTP server drains, the fan-out finishes its batch
      const before = mta.requests.length;
      expect(before).toBeLessThan(2100);
      // Every hand-over was recorded before stopping, and nothing beyond the cursor was handed over.
      const accepted = (await db.pool.query(`SELECT count(*)::int AS n FROM email_sends WHERE campaign_id = $1 AND status = 'accepted'`, [c.body.data.id])).rows[0].n;
      expect(accepted).toBe(before);

      app = await startTestApp({ role: 'backend', db, env });
      await mta.waitFor(2100, 60_000);
      await eventually(async () => (await db.pool.query(`SELECT status FROM campaigns WHERE id = $1`, [c.body.data.id])).rows[0].status === 'sent', 30_000);
      await new Promise((r) => setTimeout(r, 300));
      const jobs = jobsOf(mta.requests);
      expect(jobs).toHaveLength(2100);
      expect(new Set(jobs.map((j) => j.messageId)).size).toBe(2100);
      expect(new Set(jobs.map((j) => j.to)).size).toBe(2100);
      expect(jobs.map((j) => j.to).sort()).toEqual(eligibleEmails(3000, 'r').sort());
    } finally {
      await app.stop().catch(() => {});
      await mta.close();
      await db.drop();
    }
  }, 120_000);
});
