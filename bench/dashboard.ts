/**
 * Dashboard benchmark (`npm run bench:dashboard`). Sections, each a function of its own so
 * more can be added (e.g. the CSV import rate):
 *   - build: what the dashboard adds to `npm install` (its esbuild step, which `prepare` runs
 *     through `npm run build`), next to a full tsc build of the server measured in the same run;
 *   - render: time to first render of the Contacts screen at BENCH_CONTACTS (1,000,000)
 *     contacts in headless Chromium: from navigation start to the first page of rows in the
 *     table, each load in a fresh browser context (cold cache, a signed-in session), p50/p95;
 *     next to the Settings screen (no contact query) as the same-run baseline.
 * On its own embedded PostgreSQL (temporary directory) or DATABASE_URL (an empty database).
 * Environment: DATABASE_URL, BENCH_CONTACTS, BENCH_RENDERS (30), LM_CHROMIUM (/usr/bin/chromium).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { startLettermill, type Running } from '../src/runtime/boot.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';

const N = Number(process.env.BENCH_CONTACTS ?? 1_000_000);
const RENDERS = Number(process.env.BENCH_RENDERS ?? 30);
const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const ADMIN_TOKEN = `bench_admin_${Date.now()}_0123456789abcdef`;
const ROOT = join(import.meta.dirname, '..');

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
function quantiles(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return { p50: q(0.5), p95: q(0.95), max: s[s.length - 1]! };
}
const timeMs = (f: () => void) => {
  const t = performance.now();
  f();
  return performance.now() - t;
};

/** The dashboard's build step against a full (non-incremental) tsc build of the server. */
export function measureBuild(runs = 3): void {
  console.log('\nBuild (what the dashboard adds to npm install → prepare → npm run build)');
  const node = process.execPath;
  const dash = Array.from({ length: runs }, () => timeMs(() => execFileSync(node, ['scripts/build-dashboard.mjs'], { cwd: ROOT, stdio: 'inherit' })));
  const out = mkdtempSync(join(tmpdir(), 'lm-bench-tsc-'));
  const tsc = timeMs(() =>
    execFileSync(node, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--incremental', 'false', '--outDir', out], { cwd: ROOT, stdio: 'inherit' }),
  );
  rmSync(out, { recursive: true, force: true });
  const d = quantiles(dash);
  console.log(`  dashboard bundle (esbuild, ${runs} runs): median ${fmt(d.p50)} ms; server tsc build: ${fmt(tsc)} ms; ratio dashboard/tsc ${fmt(d.p50 / tsc, 3)}`);
}

/** N contacts in one statement per 100,000 (triggers on: counts and search words as the API writes them). */
async function seedContacts(db: Db, n: number): Promise<void> {
  const t = performance.now();
  for (let from = 0; from < n; from += 100_000) {
    await db.query(
      `INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at)
       SELECT 'ct_' || lpad(i::text, 10, '0'), 'person' || i || '@example' || (i % 97) || '.com', 'First' || (i % 5000), 'Last' || (i % 7919), 'api',
              timestamptz '2025-01-01' + i * interval '30 seconds', timestamptz '2025-01-01' + i * interval '30 seconds'
         FROM generate_series($1::int, $2::int) AS i`,
      [from + 1, Math.min(n, from + 100_000)],
    );
  }
  await db.query('VACUUM ANALYZE contacts');
  console.log(`  seeded ${fmt(n)} contacts in ${fmt((performance.now() - t) / 1000, 1)} s`);
}

/** Navigation start → the screen's first rows (a MutationObserver set before the page's scripts). */
async function firstRender(browser: Browser, base: string, cookie: string, path: string, ready: string): Promise<number> {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  try {
    await ctx.addCookies([{ name: 'lm_session', value: cookie, url: base }]);
    // No named functions inside: tsx's keepNames would wrap them in a helper the page lacks.
    await ctx.addInitScript((selector: string) => {
      const w = globalThis as any;
      new w.MutationObserver(() => {
        if (w.__rendered === undefined && w.document.querySelector(selector)) w.__rendered = w.performance.now();
      }).observe(w.document, { childList: true, subtree: true, characterData: true });
    }, ready);
    const page = await ctx.newPage();
    await page.goto(base + path);
    // Polled from here: waitForFunction's in-page polling needs eval, which the dashboard's CSP
    // forbids. The time itself is taken in the page by the observer, not by this loop.
    const deadline = Date.now() + 30_000;
    while ((await page.evaluate(() => (globalThis as any).__rendered)) === undefined) {
      if (Date.now() > deadline) throw new Error(`${path} did not render: ${(await page.locator('main').innerText()).slice(0, 600)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return await page.evaluate(() => (globalThis as any).__rendered as number);
  } finally {
    await ctx.close();
  }
}

export async function measureContactsRender(db: Db, base: string): Promise<void> {
  console.log(`\nFirst render of the Contacts screen at ${fmt(N)} contacts (Chromium, fresh context each load, ${RENDERS} loads)`);
  const setup = await fetch(`${base}/admin/setup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ adminToken: ADMIN_TOKEN, email: 'bench@lettermill.test', password: 'bench password 0123456789' }),
  });
  if (setup.status !== 201) throw new Error(`setup: ${setup.status} ${await setup.text()}`);
  const cookie = /lm_session=([^;]+)/.exec(setup.headers.get('set-cookie') ?? '')![1]!;
  const count = Number((await db.query('SELECT count(*) AS n FROM contacts')).rows[0].n);
  if (count !== N) throw new Error(`expected ${N} contacts, found ${count}`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'] });
  try {
    // The contacts screen is ready when its pager reports the total: rows and count both loaded.
    const contactsReady = 'tbody tr:nth-child(25)';
    const settingsReady = 'dl.facts dd';
    for (let i = 0; i < 3; i++) {
      await firstRender(browser, base, cookie, '/contacts', contactsReady);
      await firstRender(browser, base, cookie, '/settings', settingsReady);
    }
    const contacts: number[] = [];
    const settings: number[] = [];
    for (let i = 0; i < RENDERS; i++) {
      contacts.push(await firstRender(browser, base, cookie, '/contacts', contactsReady));
      settings.push(await firstRender(browser, base, cookie, '/settings', settingsReady));
    }
    const c = quantiles(contacts);
    const s = quantiles(settings);
    console.log(`  contacts: p50 ${fmt(c.p50)} ms, p95 ${fmt(c.p95)} ms, max ${fmt(c.max)} ms (goal p95 < 500 ms: ${c.p95 < 500 ? 'met' : 'NOT met'})`);
    console.log(`  settings (baseline, no contact query): p50 ${fmt(s.p50)} ms, p95 ${fmt(s.p95)} ms`);
    console.log(`  ratio contacts/settings p95 ${fmt(c.p95 / s.p95, 2)}`);
  } finally {
    await browser.close();
  }
}

async function main(): Promise<void> {
  measureBuild();
  const tmp = mkdtempSync(join(tmpdir(), 'lm-bench-dash-'));
  const appDir = mkdtempSync(join(tmpdir(), 'lm-bench-dash-app-'));
  let embedded: EmbeddedStore | undefined;
  let app: Running | undefined;
  let db: Db | undefined;
  try {
    let url = process.env.DATABASE_URL;
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger });
      url = embedded.url;
    }
    db = createPool(url, { max: 4 });
    await migrate(db);
    if (Number((await db.query('SELECT count(*) AS n FROM contacts')).rows[0].n) > 0) throw new Error('point DATABASE_URL at an empty database');
    await seedContacts(db, N);
    app = await startLettermill({
      role: 'backend',
      announce: () => {},
      log: silentLogger,
      env: { NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: url, HOST: '127.0.0.1', PORT: '0', DATA_DIR: appDir, ADMIN_TOKEN, BASE_URL: 'http://bench.test' },
    });
    await measureContactsRender(db, app.backendUrl!.replace('localhost', '127.0.0.1'));
  } finally {
    await app?.stop();
    await db?.end();
    await embedded?.stop();
    rmSync(tmp, { recursive: true, force: true });
    rmSync(appDir, { recursive: true, force: true });
  }
}

await main();
