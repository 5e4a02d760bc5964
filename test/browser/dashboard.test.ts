/**
 * The operator dashboard in headless Chromium against the whole app (backend + MTA in
 * process, a real database), with an SMTP sink as the relay and knotd as the MTA's resolver.
 * Each screen is checked with axe-core (injected from node_modules; CDP evaluation is not
 * subject to the page's CSP) and photographed into docs/screenshots/ for docs/dashboard.md.
 */
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDnsServer, type DnsServer } from '../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../harness/smtp-sink.js';
import { ADMIN_TOKEN, call, startBackend, type Backend } from '../backend/public/helpers.js';
import { DEFAULT_POLICY } from '../../src/mta/policy.js';
import { DomainBackoff } from '../../src/mta/state/domain-backoff.js';
import { DeliveryLogStore } from '../../src/mta/stores/delivery-logs.js';

// Page-side globals of the functions passed to page.evaluate (this project compiles without the DOM lib).
declare const document: any;
declare const window: any;

const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = 'docs/screenshots';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`browser tests skipped: ${CHROMIUM} not found (apt-get install -y chromium)`);

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const DESKTOP = { viewport: { width: 1280, height: 860 } };
const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };
const PASSWORD = 'correct horse battery staple';
const DOMAIN = 'acme.test';

describe.skipIf(!haveChromium)('operator dashboard in a browser', () => {
  let browser: Browser;
  let b: Backend;
  let sink: SmtpSink;
  let dns: DnsServer;
  const contexts: BrowserContext[] = [];
  /** Content-Security-Policy violations and page errors seen on any page: there must be none. */
  const pageProblems: string[] = [];

  const newPage = async (opts: object = DESKTOP): Promise<Page> => {
    const ctx = await browser.newContext(opts);
    contexts.push(ctx);
    const page = await ctx.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error' && /Content Security Policy|Refused to/.test(m.text())) pageProblems.push(m.text());
    });
    page.on('pageerror', (e) => pageProblems.push(String(e)));
    return page;
  };

  /** axe-core's WCAG 2 A/AA rules on the page as it is now. */
  const axe = async (page: Page, what: string) => {
    await page.evaluate(AXE);
    const violations = await page.evaluate(async () => {
      const r = await (window as any).axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa'] } });
      return r.violations.map((v: any) => `${v.id}: ${v.nodes.map((n: any) => n.target.join(' ')).join(', ')}`);
    });
    expect(violations, what).toEqual([]);
  };
  const shot = (page: Page, name: string) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });

  const login = async (page: Page, email: string, password = PASSWORD) => {
    await page.goto(`${b.url}/overview`);
    await page.getByRole('heading', { name: 'Sign in to Lettermill' }).waitFor();
    await page.getByLabel('Email', { exact: true }).fill(email);
    await page.getByLabel('Password', { exact: true }).fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
  };
  const mta = async (method: string, path: string, json?: unknown) => {
    const res = await fetch(`${b.app.mtaUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${b.app.config.MTA_API_KEY}`, ...(json ? { 'content-type': 'application/json' } : {}) },
      body: json ? JSON.stringify(json) : undefined,
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    dns = await startDnsServer({ zones: { [DOMAIN]: [{ name: '@', type: 'A', value: '127.0.0.1' }] } });
    sink = await startSmtpSink({ host: '127.0.0.1' });
    b = await startBackend({
      role: 'all',
      env: { EMAIL_PROVIDER: 'smtp', SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`, DNS_SERVERS: dns.servers, DNSBL_MONITOR: 'false' },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  }, 90_000);

  afterAll(async () => {
    for (const c of contexts) await c.close().catch(() => {});
    await browser?.close();
    await b?.close();
    await sink?.close();
    await dns?.stop();
  }, 90_000);

  it('first visit: create the first admin with ADMIN_TOKEN, land on the overview', async () => {
    const page = await newPage();
    await page.goto(b.url);
    await page.getByRole('heading', { name: 'Create the first admin' }).waitFor();
    await axe(page, 'setup');
    await shot(page, 'setup');
    // A wrong token is refused in words.
    await page.getByLabel('Admin token').fill('wrong-token');
    await page.getByLabel('Email', { exact: true }).fill('owner@acme.test');
    await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
    await page.getByRole('button', { name: 'Create admin and sign in' }).click();
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toMatch(/token/i);
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Create admin and sign in' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    expect(page.url()).toBe(`${b.url}/overview`);
    expect(await page.getByText('owner@acme.test').isVisible()).toBe(true);
    await page.getByRole('figure').first().waitFor();
    await axe(page, 'overview');
    // The cookie is HttpOnly: the page's script cannot read it.
    expect(await page.evaluate(() => document.cookie)).not.toContain('lm_session');
    const users = await call(b.url, 'GET', '/admin/users', { admin: true });
    expect(users.body.data.map((u: any) => [u.email, u.role])).toEqual([['owner@acme.test', 'admin']]);
    for (const [email, role] of [
      ['ed@acme.test', 'editor'],
      ['vi@acme.test', 'viewer'],
    ]) {
      expect((await call(b.url, 'POST', '/admin/users', { admin: true, json: { email, password: PASSWORD, role } })).status).toBe(201);
    }
  }, 90_000);

  it('each role sees and may do what it is allowed', async () => {
    const t = await call(b.url, 'POST', '/admin/templates', { admin: true, json: { name: 'Welcome', subject: 'Welcome aboard', html: '<p>Hello</p>' } });
    const tplId = t.body.data.id;

    const viewer = await newPage();
    await login(viewer, 'vi@acme.test');
    expect(await viewer.getByRole('link', { name: 'Users' }).count()).toBe(0);
    await viewer.getByRole('link', { name: 'Templates' }).click();
    await viewer.getByRole('link', { name: 'Welcome' }).waitFor();
    expect(await viewer.getByRole('link', { name: 'New template' }).count()).toBe(0);
    await viewer.getByRole('link', { name: 'Welcome' }).click();
    await viewer.getByLabel('Subject', { exact: true }).waitFor();
    expect(await viewer.getByLabel('Subject', { exact: true }).isDisabled()).toBe(true);
    expect(await viewer.getByRole('button', { name: 'Send test' }).count()).toBe(0);
    // The server refuses the viewer's write too, and the words reach the screen.
    const refused = await viewer.evaluate(async (id) => {
      const s: any = await (await fetch('/admin/session')).json();
      const r = await fetch(`/admin/templates/${id}`, { method: 'PATCH', headers: { 'content-type': 'application/json', 'x-csrf-token': s.data.csrfToken }, body: '{"name":"x"}' });
      return { status: r.status, body: (await r.json()) as any };
    }, tplId);
    expect(refused.status).toBe(403);
    expect(refused.body.error.message).toMatch(/viewer role may not change templates/);
    await viewer.getByRole('link', { name: 'Contacts' }).click();
    await viewer.getByRole('heading', { name: 'Contacts' }).waitFor();
    expect(await viewer.getByRole('heading', { name: 'Import contacts from CSV' }).count()).toBe(0);

    const editor = await newPage();
    await login(editor, 'ed@acme.test');
    expect(await editor.getByRole('link', { name: 'Users' }).count()).toBe(0);
    await editor.getByRole('link', { name: 'Templates' }).click();
    await editor.getByRole('link', { name: 'New template' }).waitFor();
    await editor.getByRole('link', { name: 'API keys' }).click();
    await editor.getByRole('heading', { name: 'API keys' }).waitFor();
    expect(await editor.getByRole('button', { name: 'Create key' }).count()).toBe(0);
    await editor.goto(`${b.url}/users`);
    await editor.getByText('Only admins manage users.').waitFor();

    const admin = await newPage();
    await login(admin, 'owner@acme.test');
    await admin.getByRole('link', { name: 'Users' }).click();
    await admin.getByRole('cell', { name: 'vi@acme.test', exact: true }).waitFor();
    const form = admin.getByRole('form', { name: 'New user' });
    await form.getByLabel('Email', { exact: true }).fill('late@acme.test');
    await form.getByLabel('Password', { exact: true }).fill(PASSWORD);
    await form.getByLabel('Role').selectOption('editor');
    await form.getByRole('button', { name: 'Add user' }).click();
    await admin.getByRole('cell', { name: 'late@acme.test', exact: true }).waitFor();
    await admin.getByText('POST /admin/users').first().waitFor(); // the audit log names the write
    await axe(admin, 'users');
    await shot(admin, 'users');
    await admin.getByRole('link', { name: 'API keys' }).click();
    await admin.getByLabel('Key name').fill('Checkout service');
    await admin.getByRole('button', { name: 'Create key' }).click();
    const shown = await admin.getByLabel('New key (shown once: copy it now)').inputValue();
    expect(shown).toMatch(/^lm_live_/);
    await admin.getByRole('cell', { name: 'Checkout service', exact: true }).waitFor();
    await axe(admin, 'api keys');
    await shot(admin, 'api-keys');
    // The key works on /api/v1 with its scope.
    const used = await fetch(`${b.url}/api/v1/transactional`, { method: 'POST', headers: { authorization: `Bearer ${shown}`, 'content-type': 'application/json' }, body: '{}' });
    expect(used.status).toBe(400); // authenticated and scoped; the empty body is what is refused
  }, 90_000);

  it('template: create, preview at desktop and phone widths, test-send to the sink, share link', async () => {
    const page = await newPage();
    await login(page, 'ed@acme.test');
    await page.getByRole('link', { name: 'Templates' }).click();
    await page.getByRole('link', { name: 'New template' }).click();
    await page.getByLabel('Name', { exact: true }).fill('Autumn news');
    await page.getByLabel('Subject', { exact: true }).fill('Leaves are falling');
    await page.getByLabel('HTML', { exact: true }).fill('<html><body><h1 style="color:#8a3b12">Autumn at Acme</h1><p>Our new range is in.</p></body></html>');
    const frame = page.frameLocator('iframe[title="Template preview"]');
    await frame.getByRole('heading', { name: 'Autumn at Acme' }).waitFor();
    const desktop = await page.locator('iframe[title="Template preview"]').boundingBox();
    await page.getByLabel('Phone (375 px)').check();
    await page.waitForFunction(() => document.querySelector('iframe.frame')!.getBoundingClientRect().width <= 375);
    const phone = await page.locator('iframe[title="Template preview"]').boundingBox();
    expect(desktop!.width).toBeGreaterThanOrEqual(590);
    expect(phone!.width).toBeLessThanOrEqual(375);
    await page.getByRole('button', { name: 'Create template' }).click();
    await page.getByText('Template saved.').waitFor();
    expect(page.url()).toMatch(/\/templates\/tpl_/);
    await page.getByLabel('From', { exact: true }).fill('Acme <news@acme.test>');
    await page.getByLabel('To', { exact: true }).fill('reviewer@sink.test');
    await page.getByRole('button', { name: 'Send test' }).click();
    await page.getByText(/Test sent to reviewer@sink.test/).waitFor();
    const [msg] = await sink.waitForMessages(1);
    expect(msg!.rcptTo).toEqual(['reviewer@sink.test']);
    const raw = msg!.data.toString();
    expect(raw).toMatch(/^Subject: \[Test\] Leaves are falling/m);
    expect(raw).toContain('Autumn at Acme');
    await page.getByRole('button', { name: 'Create share link' }).click();
    const url = await page.getByLabel('Share link').inputValue();
    const shared = await fetch(url);
    expect(shared.status).toBe(200);
    expect(await shared.text()).toContain('Autumn at Acme');
    await axe(page, 'template editor');
    await shot(page, 'template-editor');
    // A bad From is refused in words.
    await page.getByLabel('From', { exact: true }).fill('not an address');
    await page.getByRole('button', { name: 'Send test' }).click();
    expect(await page.getByRole('alert').first().textContent()).toMatch(/from must be an address/);
  }, 90_000);

  it('contacts: search, cursor paging, detail with activity, at phone width too', async () => {
    const at = Date.now();
    const values = Array.from({ length: 60 }, (_, i) => `('ct_${String(i).padStart(3, '0')}', 'person${i}@example.com', 'Person${i}', 'api', to_timestamp(${at / 1000 + i}), to_timestamp(${at / 1000 + i}))`);
    await b.app.db.pool.query(`INSERT INTO contacts (id, email, first_name, source, created_at, updated_at) VALUES ${values.join(',')}`);
    await b.app.db.pool.query(`INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at) VALUES ('ct_zz', 'grace@hopper.test', 'Grace', 'Hopper', 'form', now(), now())`);
    await b.app.db.pool.query(
      `INSERT INTO contact_activity (id, email, contact_id, type, source, occurred_at, created_at) VALUES ('ca_1', 'grace@hopper.test', 'ct_zz', 'delivered', 'mta', now(), now())`,
    );
    const page = await newPage();
    await login(page, 'vi@acme.test');
    await page.getByRole('link', { name: 'Contacts' }).click();
    await page.getByText('Page 1 · 61 in all', { exact: true }).waitFor();
    // Exact text: while the next page loads, the pager reads "Loading… Page 2 · …" over the old rows.
    const firstPage = await page.locator('tbody tr td:first-child').allTextContents();
    expect(firstPage).toHaveLength(25);
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByText('Page 2 · 61 in all', { exact: true }).waitFor(); // exact: not "Loading… Page 2" (old rows)
    const second = await page.locator('tbody tr td:first-child').allTextContents();
    expect(second).toHaveLength(25);
    expect(second.filter((e) => firstPage.includes(e))).toEqual([]);
    await page.getByRole('button', { name: 'Previous' }).click();
    await page.getByText('Page 1 · 61 in all', { exact: true }).waitFor();
    await axe(page, 'contacts');
    await shot(page, 'contacts');
    await page.getByLabel('Search contacts').fill('hopper');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.getByText('Page 1 · 1 in all', { exact: true }).waitFor();
    await page.getByRole('link', { name: 'grace@hopper.test' }).click();
    await page.getByRole('heading', { name: 'grace@hopper.test' }).waitFor();
    await page.getByText('delivered').first().waitFor();
    await axe(page, 'contact detail');
    await shot(page, 'contact-detail');

    const phone = await newPage(PHONE);
    await login(phone, 'vi@acme.test');
    await phone.getByRole('button', { name: 'Menu' }).click();
    await phone.getByRole('link', { name: 'Contacts' }).click();
    await phone.getByText('Page 1 · 61 in all', { exact: true }).waitFor();
    const width = await phone.evaluate(() => document.documentElement.scrollWidth);
    expect(width).toBeLessThanOrEqual(390); // nothing wider than the phone
    await axe(phone, 'contacts on a phone');
    await shot(phone, 'contacts-phone');
  }, 90_000);

  it('CSV import of 100,000 contacts: progress shown, rejected rows reported, then search and page', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'lm-dash-import-'));
    const file = join(dir, 'contacts.csv');
    const lines = ['email,first_name,last_name'];
    for (let i = 0; i < 100_000; i++) lines.push(i === 500 ? 'not-an-address,Bad,Row' : i === 7000 ? 'also@@wrong,Bad,Row' : `reader${i}@import.test,Reader,Number${i}`);
    writeFileSync(file, lines.join('\n') + '\n');
    const page = await newPage();
    await login(page, 'ed@acme.test');
    await page.getByRole('link', { name: 'Contacts' }).click();
    await page.getByLabel('CSV file').setInputFiles(file);
    await page.getByRole('button', { name: 'Import', exact: true }).click();
    await page.getByText(/^Import running/).waitFor(); // progress is shown while it runs
    await page.getByText(/^Import done: 100,000 of 100,000 rows/).waitFor({ timeout: 110_000 });
    expect(await page.getByRole('progressbar', { name: 'Import progress' }).getAttribute('value')).toBe('100');
    await page.getByText('99,998 imported, 2 rejected.').waitFor();
    const rejected = await page.locator('table', { hasText: 'Rejected rows' }).locator('tbody tr td:first-child').allTextContents();
    expect(rejected).toHaveLength(2);
    await axe(page, 'contacts import');
    await shot(page, 'contacts-import');
    const total = (await b.app.db.pool.query(`SELECT count(*)::int AS n FROM contacts`)).rows[0].n;
    await page.reload();
    await page.getByText(`Page 1 · ${total.toLocaleString('en')} in all`).waitFor();
    await page.getByLabel('Search contacts').fill('number4242');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.getByRole('link', { name: 'reader4242@import.test' }).waitFor();
    await page.getByLabel('Search contacts').fill('import.test');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.getByText('Page 1 · 99,998 in all', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByText('Page 2 · 99,998 in all', { exact: true }).waitFor();
    rmSync(dir, { recursive: true, force: true });
  }, 180_000);

  it('deliverability screens show the MTA state the test set up', async () => {
    // Suppressions: two added on the MTA directly.
    expect((await mta('POST', '/suppression', { addresses: ['gone@example.org', 'angry@example.org'], reason: 'manual' })).status).toBe(200);
    // A DKIM key for the domain, and its TXT record published in knotd.
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    expect((await mta('POST', '/dkim', { domain: DOMAIN, selector: 'lm1', privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() })).status).toBeLessThan(300);
    const records = (await mta('GET', `/domains/${DOMAIN}/records`)).body.data as { kind: string; name: string; type: string; value: string }[];
    const dkim = records.find((r) => r.type === 'TXT' && /_domainkey/.test(r.name))!;
    expect(dkim).toBeDefined();
    await dns.setRecords(DOMAIN, [{ name: '@', type: 'A', value: '127.0.0.1' }, { name: dkim.name.replace(`.${DOMAIN}`, '').replace(/\.$/, ''), type: 'TXT', value: dkim.value }]);

    const page = await newPage();
    await login(page, 'owner@acme.test');
    await page.getByRole('link', { name: 'Deliverability' }).click();
    await page.getByRole('cell', { name: 'gone@example.org', exact: true }).waitFor();
    await page.getByRole('cell', { name: 'angry@example.org', exact: true }).waitFor();
    await axe(page, 'suppressions');
    await shot(page, 'deliverability-suppressions');
    // Remove one in the UI: the MTA no longer suppresses it.
    await page.getByRole('button', { name: 'Remove gone@example.org' }).click();
    await page.getByText('gone@example.org removed from the suppression list.').waitFor();
    expect((await mta('GET', '/suppression/check/gone@example.org')).body.data.suppressed).toBe(false);
    // Add one in the UI: the MTA suppresses it.
    await page.getByLabel('Suppress an address').fill('new@example.org');
    await page.getByRole('button', { name: 'Suppress', exact: true }).click();
    await page.getByRole('cell', { name: 'new@example.org', exact: true }).waitFor();
    expect((await mta('GET', '/suppression/check/new@example.org')).body.data).toMatchObject({ suppressed: true, reason: 'manual' });

    // The queue by destination domain: two domains whose servers could not be reached three
    // times (the MTA's domain backoff, recorded as its delivery effects record it), so the
    // workers defer their jobs and pause the groups; one also has a 4xx reply in the delivery log.
    const { coord, clock, db } = b.app.services;
    const backoff = new DomainBackoff(coord, clock, DEFAULT_POLICY);
    for (const domain of ['qv-reply.test', 'qv-held.test']) for (let i = 0; i < DEFAULT_POLICY.domainBackoff.threshold; i++) await backoff.recordFailure(domain);
    const replyAt = clock.now();
    await new DeliveryLogStore(db).append({
      messageId: 'qv-m0', jobId: null, organizationId: 'org-qv', recipient: 'r0@qv-reply.test', domain: 'qv-reply.test', pool: 'transactional', ip: '127.0.0.1',
      status: 'deferred', code: 451, enhancedCode: '4.7.1', reason: null, response: '451 4.7.1 Greylisted, try again later', mxHost: 'mx.qv-reply.test', attempt: 1, at: replyAt,
    });
    for (const to of ['r1@qv-reply.test', 'r2@qv-reply.test', 'h1@qv-held.test']) {
      const sent = await mta('POST', '/send', { messageId: `qv-${to}`, to, from: 'News <news@sender.example>', subject: 'Hi', html: '<p>Hi</p>', ipPool: 'transactional', organizationId: 'org-qv', dkimDomain: 'sender.example' });
      expect(sent.status, JSON.stringify(sent.body)).toBeLessThan(300);
    }
    type Qd = { domain: string; pending: number; delayed: number; lastReply: { code: number; text: string } | null; paused: { reason: string | null; until: string } | null };
    let domains: Qd[] = [];
    for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 200))) {
      domains = (await mta('GET', '/queue/domains')).body.data;
      if (domains.filter((d) => d.domain.startsWith('qv-') && d.paused && d.delayed + d.pending === (d.domain === 'qv-reply.test' ? 2 : 1)).length === 2) break;
    }
    const reply = domains.find((d) => d.domain === 'qv-reply.test')!;
    const held = domains.find((d) => d.domain === 'qv-held.test')!;
    // The reason is the deferring job's own ("phase: reason").
    expect(reply).toMatchObject({ pending: 0, delayed: 2, lastReply: { code: 451, text: '451 4.7.1 Greylisted, try again later' }, paused: { reason: 'domain_backoff: domain_backoff' } });
    expect(held).toMatchObject({ pending: 0, delayed: 1, lastReply: null, paused: { reason: 'domain_backoff: domain_backoff' } });

    await page.getByRole('link', { name: 'Queue' }).click();
    const stats = (await mta('GET', '/queue/stats')).body.data as Record<string, number>;
    for (const [k, v] of Object.entries(stats)) {
      await page.locator('.kpi', { hasText: k }).getByText(v.toLocaleString('en'), { exact: true }).waitFor();
    }
    const byDomain = page.getByRole('table', { name: 'By destination domain' });
    const rowOf = (domain: string) => byDomain.getByRole('row').filter({ has: page.getByRole('cell', { name: domain, exact: true }) });
    const cells = async (domain: string) => rowOf(domain).getByRole('cell').allTextContents();
    await rowOf('qv-reply.test').waitFor();
    const at = (iso: string) => new Date(iso).toLocaleString('en-GB', { timeZone: 'UTC' }) + ' UTC';
    expect((await cells('qv-reply.test')).slice(1)).toEqual([
      '0', '2', '0', expect.any(String),
      `451 4.7.1 Greylisted, try again later (${at(new Date(replyAt).toISOString())})`,
      `until ${at(reply.paused!.until)}: domain_backoff: domain_backoff`,
    ]);
    expect((await cells('qv-held.test')).slice(1)).toEqual(['0', '1', '0', expect.any(String), '—', `until ${at(held.paused!.until)}: domain_backoff: domain_backoff`]);
    await page.getByRole('navigation', { name: 'Destination domains pages' }).getByText('Page 1').waitFor();
    await axe(page, 'queue');
    await shot(page, 'deliverability-queue');

    await page.getByRole('link', { name: 'Sending IPs' }).click();
    const ips = (await mta('GET', '/ip-reputation')).body.data as { ip: string }[];
    if (ips.length) for (const ip of ips) await page.getByRole('heading', { name: new RegExp(ip.ip.replace(/\./g, '\\.')) }).waitFor();
    else await page.getByText('The MTA has no sending IPs configured.').waitFor();
    await page.getByRole('heading', { name: 'Audit' }).waitFor();
    await axe(page, 'ips');
    await shot(page, 'deliverability-ips');

    await page.getByRole('link', { name: 'DKIM keys' }).click();
    await page.getByRole('cell', { name: DOMAIN, exact: true }).waitFor();
    await page.getByRole('cell', { name: /^lm1/ }).waitFor();
    await axe(page, 'dkim');
    await shot(page, 'deliverability-dkim');

    await page.getByRole('link', { name: 'DNS records' }).click();
    await page.getByLabel('Sending domain').fill(DOMAIN);
    await page.getByRole('button', { name: 'Check DNS now' }).click();
    await page.locator('tbody tr').first().waitFor();
    const checked = (await mta('GET', `/domains/${DOMAIN}/check`)).body.data as { name: string; state: string; type: string }[];
    const rows = await page.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [tr.children[1]!.textContent, tr.children[2]!.textContent, tr.children[4]!.textContent]));
    expect(rows).toHaveLength(checked.length);
    for (const c of checked) expect(rows.find((r) => r[0] === c.name && r[1] === c.type)![2]).toMatch(new RegExp(`^${c.state}`));
    // The published DKIM record checks ok; the SPF record the test did not publish is missing.
    expect(rows.find((r) => r[0] === dkim.name)![2]).toMatch(/^ok/);
    expect(rows.some((r) => /^missing/.test(r[2]!))).toBe(true);
    await axe(page, 'dns');
    await shot(page, 'deliverability-dns');
  }, 90_000);

  it('the other screens render, reachable and labelled', async () => {
    const topic = await call(b.url, 'POST', '/admin/topics', { admin: true, json: { name: 'Acme Weekly', requireDoubleOptIn: true } });
    await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'Footer sign-up', topicId: topic.body.data.id, doubleOptIn: true } });
    await call(b.url, 'POST', '/admin/campaigns', { admin: true, json: { name: 'November', subject: 'November news', from: 'Acme <news@acme.test>', topicId: topic.body.data.id, html: '<p>Hi</p>' } });
    const page = await newPage();
    await login(page, 'owner@acme.test');
    const screens: [string, string, () => Promise<void>][] = [
      ['Overview', 'overview', () => page.locator('.kpi', { hasText: 'Sent' }).getByText('1', { exact: true }).waitFor()],
      ['Topics and forms', 'topics-forms', async () => {
        const embed = await page.getByLabel('Embed code for Footer sign-up').inputValue();
        expect(embed).toContain(`action="${b.url}/forms/`);
      }],
      ['Campaigns', 'campaigns', () => page.getByRole('cell', { name: 'draft', exact: true }).waitFor()],
      ['Transactional log', 'transactional', () => page.getByRole('link', { name: 'reviewer@sink.test' }).waitFor()],
      ['Webhooks', 'webhooks', () => page.getByLabel('Endpoint URL').waitFor()],
      ['Settings', 'settings', () => page.getByText('Acme Newsletters').waitFor()],
    ];
    for (const [link, name, check] of screens) {
      await page.getByRole('link', { name: link, exact: true }).click();
      await page.getByRole('heading', { name: link, level: 1 }).waitFor();
      await check();
      await axe(page, name);
      await shot(page, name);
    }
    // The transactional log's timeline of the test send.
    await page.getByRole('link', { name: 'Transactional log' }).click();
    await page.getByLabel('Recipient').fill('reviewer@sink.test');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.getByRole('link', { name: 'reviewer@sink.test' }).click();
    await page.getByRole('heading', { name: 'Events' }).waitFor();
    await page.getByText('created').first().waitFor();
    await shot(page, 'transactional-detail');
    // Keyboard: on a fresh load the skip link is the first stop and takes focus to the content.
    await page.reload();
    await page.getByRole('heading', { name: 'Events' }).waitFor();
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to content');
    await page.keyboard.press('Enter');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('main');
  }, 90_000);

  it('a session expires, a write without the CSRF token is refused, logins are throttled', async () => {
    const page = await newPage();
    await login(page, 'ed@acme.test');
    // CSRF: the cookie alone does not make a write.
    const noCsrf = await page.evaluate(async () => {
      const r = await fetch('/admin/templates', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'x', subject: 'x', html: 'x' }) });
      return { status: r.status, body: (await r.json()) as any };
    });
    expect(noCsrf.status).toBe(403);
    expect(noCsrf.body.error.data.reason).toBe('csrf_failed');
    expect((await b.app.db.pool.query(`SELECT count(*)::int AS n FROM templates WHERE name = 'x'`)).rows[0].n).toBe(0);
    // Expiry: the session has been idle past the timeout; the next screen asks to sign in, saying why.
    await b.app.db.pool.query(`UPDATE admin_sessions SET last_seen_at = last_seen_at - interval '1 day' WHERE user_id = (SELECT id FROM admin_users WHERE email = 'ed@acme.test')`);
    await page.getByRole('link', { name: 'Campaigns' }).click();
    await page.getByRole('heading', { name: 'Sign in to Lettermill' }).waitFor();
    await page.getByText('Your session has expired; log in again').waitFor();
    await shot(page, 'session-expired');
    // Throttling: wrong passwords until the account is locked; then even the right one is refused.
    let locked = false;
    for (let i = 0; i < 8 && !locked; i++) {
      await page.getByLabel('Email', { exact: true }).fill('vi@acme.test');
      await page.getByLabel('Password', { exact: true }).fill(`wrong password ${i}`);
      await page.getByRole('button', { name: 'Sign in' }).click();
      const text = await page.getByRole('alert').textContent();
      locked = /too many|locked|try again/i.test(text ?? '') && !/invalid email or password/i.test(text ?? '');
      await page.waitForTimeout(50);
    }
    expect(locked).toBe(true);
    await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForTimeout(300);
    expect(await page.getByRole('heading', { name: 'Sign in to Lettermill' }).isVisible()).toBe(true);
    await axe(page, 'login throttled');
    await shot(page, 'login-throttled');
    expect(pageProblems).toEqual([]);
  }, 90_000);
});
