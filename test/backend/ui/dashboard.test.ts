/**
 * The dashboard area on the real backend: its HTML (with CSP) on its own paths only, hashed
 * assets, the paths of the API and the public pages untouched, and the read-only routes it
 * adds (overview aggregates, contacts, the transactional log, settings, the MTA proxy).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DASHBOARD_SECTIONS } from '../../../src/shared/dashboard-paths.js';
import { dashboardDir } from '../../../src/backend/ui/static.js';
import { call, startBackend, type Backend } from '../public/helpers.js';

const DAY = 86_400_000;

describe('dashboard serving and routes', () => {
  let b: Backend;
  beforeAll(async () => {
    b = await startBackend();
  }, 60_000);
  afterAll(async () => {
    await b?.close();
  });

  it('is built: dist/dashboard has index.html and hashed assets', () => {
    const dir = dashboardDir();
    expect(dir).not.toBeNull();
    expect(readdirSync(join(dir!, 'assets')).some((f) => /^app-[A-Z0-9]+\.js$/.test(f))).toBe(true);
  });

  it('answers / and every dashboard path with the app, under a strict CSP', async () => {
    for (const path of ['/', '/overview', '/contacts', '/contacts/ct_1', '/templates/new', '/deliverability/dns', '/webhook-endpoints/wh_1']) {
      const r = await call(b.url, 'GET', path);
      expect(r.status, path).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^text\/html/);
      const csp = r.headers.get('content-security-policy')!;
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toMatch(/script-src[^;]*unsafe/);
      expect(r.text).toContain('<div id="app">');
    }
    const js = /src="(\/dashboard-assets\/app-[A-Z0-9]+\.js)"/.exec((await call(b.url, 'GET', '/')).text)![1]!;
    const asset = await call(b.url, 'GET', js);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(asset.headers.get('cache-control')).toContain('immutable');
    expect((await call(b.url, 'GET', '/dashboard-assets/nope.js')).status).toBe(404);
    // Not a dashboard path: the API's 404 envelope, not the app.
    const other = await call(b.url, 'GET', '/no-such-page');
    expect(other.status).toBe(404);
    expect(other.body.error).toBeDefined();
  });

  it('shadows nothing: the API, the public pages and webhooks keep their answers', async () => {
    expect((await call(b.url, 'GET', '/api/v1/health')).body).toMatchObject({ data: { status: 'ok' } });
    expect((await call(b.url, 'GET', '/api/v1/contacts')).status).toBe(401);
    expect((await call(b.url, 'GET', '/admin/templates')).status).toBe(401);
    for (const path of ['/unsub/abc', '/prefs/abc', '/confirm/doi?token=x']) {
      const r = await call(b.url, 'GET', path);
      expect(r.text, path).not.toContain('<div id="app">');
    }
    for (const path of ['/archive/abc', '/share/abc', '/t/o/es_1', '/api/v1/openapi.json']) {
      const r = await call(b.url, 'GET', path);
      expect(r.text, path).not.toContain('<div id="app">');
      expect(r.headers.get('content-security-policy') ?? '', path).not.toContain("frame-ancestors 'none'");
    }
    // POST /webhooks/* still reaches the feedback receivers (401/400, never the app or a 404).
    const hook = await call(b.url, 'POST', '/webhooks/mta', { json: {} });
    expect([400, 401, 403]).toContain(hook.status);
    // No dashboard section is the first segment of a route path another area declares.
    const firstSegments = new Set<string>();
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
    for (const f of walk('src/backend').filter((f) => !f.includes('/ui/'))) {
      for (const m of readFileSync(f, 'utf8').matchAll(/['`]\/([a-z][a-z0-9-]*)[/'`?]/g)) firstSegments.add(m[1]!);
    }
    expect(firstSegments).toContain('unsub');
    expect(firstSegments).toContain('webhooks');
    expect(DASHBOARD_SECTIONS.filter((s) => firstSegments.has(s))).toEqual([]);
  });

  it('overview stats: per-day sends and outcomes, rates against the danger lines', async () => {
    const now = Date.now();
    const day = (n: number) => new Date(Math.floor(now / DAY) * DAY - n * DAY + 3_600_000);
    const rows: [string, string, Date][] = [
      ['es_a1', 'delivered', day(0)],
      ['es_a2', 'delivered', day(0)],
      ['es_a3', 'bounced', day(0)],
      ['es_a4', 'complained', day(1)],
      ['es_a5', 'sent', day(1)],
      ['es_old', 'delivered', day(40)],
    ];
    for (const [id, status, at] of rows) {
      await b.app.db.pool.query(
        `INSERT INTO email_sends (id, type, to_email, from_email, subject, provider, status, created_at, updated_at)
         VALUES ($1, 'transactional', $2, 'news@acme.example', 'Hi', 'mta', $3, $4, $4)`,
        [id, `${id}@example.com`, status, at],
      );
    }
    await b.app.db.pool.query(
      `INSERT INTO email_engagement (email_send_id, sent_at, opens, first_human_open_at, clicks, first_human_click_at) VALUES ('es_a1', $1, 1, $1, 1, $1), ('es_a2', $1, 1, $1, 0, NULL)`,
      [day(0)],
    );
    expect((await call(b.url, 'GET', '/admin/dashboard/stats')).status).toBe(401);
    const r = await call(b.url, 'GET', '/admin/dashboard/stats?days=7', { admin: true });
    expect(r.status).toBe(200);
    const s = r.body.data;
    expect(s.days).toHaveLength(7);
    const today = s.days[6];
    expect(today).toMatchObject({ day: day(0).toISOString().slice(0, 10), sends: 3, delivered: 2, bounced: 1, complained: 0, opens: 2, clicks: 1 });
    expect(s.days[5]).toMatchObject({ sends: 2, complained: 1 });
    expect(s.totals).toEqual({ sends: 5, bounced: 1, complained: 1 });
    expect(s.rates.bounce).toBeCloseTo(0.2);
    expect(s.thresholds).toEqual({ complaint: 0.003, bounce: 0.05 });
    expect((await call(b.url, 'GET', '/admin/dashboard/stats?days=0', { admin: true })).status).toBe(400);
  });

  it('transactional log: search by recipient and Message-ID, pages by cursor, timeline', async () => {
    const base = Date.now();
    for (let i = 0; i < 5; i++) {
      await b.app.db.pool.query(
        `INSERT INTO email_sends (id, type, to_email, from_email, subject, provider, status, message_id, created_at, updated_at)
         VALUES ($1, 'transactional', $2, 'a@acme.example', 'Receipt', 'mta', 'accepted', $3, $4, $4)`,
        [`es_t${i}`, i < 3 ? 'Buyer@Shop.example' : 'other@shop.example', `<m${i}@acme.example>`, new Date(base + i)],
      );
    }
    const first = await call(b.url, 'GET', '/admin/dashboard/sends?recipient=buyer@shop.example&limit=2', { admin: true });
    expect(first.body.data.map((s: any) => s.id)).toEqual(['es_t2', 'es_t1']);
    expect(first.body.pagination.isDone).toBe(false);
    const second = await call(b.url, 'GET', `/admin/dashboard/sends?recipient=buyer@shop.example&limit=2&cursor=${first.body.pagination.cursor}`, { admin: true });
    expect(second.body.data.map((s: any) => s.id)).toEqual(['es_t0']);
    expect(second.body.pagination.isDone).toBe(true);
    const byId = await call(b.url, 'GET', '/admin/dashboard/sends?messageId=m4@acme.example', { admin: true });
    expect(byId.body.data.map((s: any) => s.id)).toEqual(['es_t4']);
    await b.app.db.pool.query(
      `INSERT INTO contact_activity (id, email, type, send_id, source, occurred_at, created_at) VALUES ('ca_1', 'other@shop.example', 'delivered', 'es_t4', 'mta', $1, $1)`,
      [new Date(base + 10)],
    );
    const one = await call(b.url, 'GET', '/admin/dashboard/sends/es_t4', { admin: true });
    expect(one.body.data.timeline.map((e: any) => e.type)).toEqual(['created', 'delivered']);
    expect((await call(b.url, 'GET', '/admin/dashboard/sends/es_nope', { admin: true })).body.error.data.reason).toBe('send_not_found');
  });

  it('contacts for the operator: list, search, detail with topics, activity', async () => {
    const at = new Date();
    for (const [id, email, first] of [
      ['ct_1', 'ada@example.com', 'Ada'],
      ['ct_2', 'bob@example.com', 'Bob'],
    ]) {
      await b.app.db.pool.query(`INSERT INTO contacts (id, email, first_name, source, created_at, updated_at) VALUES ($1, $2, $3, 'api', $4, $4)`, [id, email, first, at]);
    }
    const list = await call(b.url, 'GET', '/admin/dashboard/contacts?limit=1', { admin: true });
    expect(list.body.data).toHaveLength(1);
    expect(list.body.pagination.totalItems).toBe(2);
    const next = await call(b.url, 'GET', `/admin/dashboard/contacts?limit=1&cursor=${encodeURIComponent(list.body.pagination.cursor)}`, { admin: true });
    expect(next.body.data[0].id).not.toBe(list.body.data[0].id);
    const found = await call(b.url, 'GET', '/admin/dashboard/contacts?search=ada', { admin: true });
    expect(found.body.data.map((c: any) => c.email)).toEqual(['ada@example.com']);
    const one = await call(b.url, 'GET', '/admin/dashboard/contacts/ada%40example.com', { admin: true });
    expect(one.body.data).toMatchObject({ id: 'ct_1', topics: [] });
    await b.app.db.pool.query(
      `INSERT INTO contact_activity (id, email, contact_id, type, source, occurred_at, created_at) VALUES ('ca_2', 'ada@example.com', 'ct_1', 'opened', 'tracking', $1, $1)`,
      [at],
    );
    const act = await call(b.url, 'GET', '/admin/dashboard/contacts/ct_1/activity', { admin: true });
    expect(act.body.data.map((a: any) => a.type)).toEqual(['opened']);
  });

  it('campaign engagement: open and click rates, clicks per link (machine clicks apart)', async () => {
    const at = new Date();
    for (const id of ['es_c1', 'es_c2', 'es_c3', 'es_c4']) {
      await b.app.db.pool.query(
        `INSERT INTO email_sends (id, type, campaign_id, to_email, from_email, subject, provider, status, created_at, updated_at)
         VALUES ($1, 'campaign', 'cmp_x', $1 || '@example.com', 'a@acme.example', 'Hi', 'mta', 'delivered', $2, $2)`,
        [id, at],
      );
    }
    await b.app.db.pool.query(
      `INSERT INTO email_engagement (email_send_id, campaign_id, sent_at, opens, first_human_open_at, clicks, first_human_click_at)
       VALUES ('es_c1', 'cmp_x', $1, 1, $1, 2, $1), ('es_c2', 'cmp_x', $1, 1, $1, 0, NULL)`,
      [at],
    );
    await b.app.db.pool.query(
      `INSERT INTO email_clicks (email_send_id, url, clicked_at, machine) VALUES
         ('es_c1', 'https://shop.example/a', $1, false), ('es_c1', 'https://shop.example/a', $1, false),
         ('es_c2', 'https://shop.example/b', $1, true), ('es_c3', 'https://shop.example/a', $1, false)`,
      [at],
    );
    const r = await call(b.url, 'GET', '/admin/dashboard/campaigns/cmp_x/engagement', { admin: true });
    expect(r.body.data).toMatchObject({ sends: 4, opened: 2, clicked: 1, openRate: 0.5, clickRate: 0.25 });
    expect(r.body.data.links).toEqual([
      { url: 'https://shop.example/a', clicks: 3, recipients: 2, machine: 0 },
      { url: 'https://shop.example/b', clicks: 0, recipients: 0, machine: 1 },
    ]);
  });

  it('settings and the MTA proxy: allow-listed routes only, 503 without an MTA', async () => {
    const s = await call(b.url, 'GET', '/admin/dashboard/settings', { admin: true });
    expect(s.body.data).toMatchObject({ organizationName: 'Acme Newsletters', baseUrl: b.url });
    expect(JSON.stringify(s.body)).not.toContain('test-admin-token');
    const noMta = await call(b.url, 'GET', '/admin/mta/queue/stats', { admin: true });
    expect(noMta.status).toBe(503);
    expect(noMta.body.error.message).toMatch(/No MTA is configured/);
    const blocked = await call(b.url, 'POST', '/admin/mta/queue/flush', { admin: true, json: {} });
    expect(blocked.status).toBe(404);
    expect(blocked.body.error.message).toMatch(/does not reach POST \/queue\/flush/);
    expect((await call(b.url, 'GET', '/admin/mta/queue/stats')).status).toBe(401);
  });
});
