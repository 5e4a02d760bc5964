/**
 * Dashboard benchmark (`npm run bench:dashboard`). One exported function per measurement, so
 * measurements can be added side by side; the main block runs them all on one embedded
 * PostgreSQL (or DATABASE_URL, an empty database) and prints absolute numbers and ratios to a
 * baseline measured in the same run.
 *
 * measureBuild: what the dashboard adds to `npm install` (its esbuild step, which `prepare`
 * runs through `npm run build`), next to a full tsc build of the server.
 *
 * measureCsvImport: the admin CSV import (ContactImporter: spool, stream-parse, validate with
 * the address grammar, batched INSERT … ON CONFLICT) of BENCH_IMPORT_ROWS rows (100,000) into
 * the contacts table with all its indexes, against a raw server-side `COPY contacts FROM` of
 * the same rows (pre-validated, ids given) into the same table: the database's own floor.
 * Each is run BENCH_ROUNDS times (2) alternately on an emptied table; the best of each counts.
 *
 * measureContactsRender: time to first render of the Contacts screen at BENCH_CONTACTS
 * (1,000,000) contacts in headless Chromium (LM_CHROMIUM, /usr/bin/chromium): from navigation
 * start to the first page of rows, each load in a fresh browser context (cold cache, a
 * signed-in session), BENCH_RENDERS (30) loads, p50/p95; next to the Settings screen (no
 * contact query) as the same-run baseline.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync, chmodSync, createReadStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { ContactImporter } from '../src/backend/api/contact-import.js';
import { startLettermill, type Running } from '../src/runtime/boot.js';
import { systemClock } from '../src/shared/clock.js';
import { newId } from '../src/shared/crypto.js';
import { csvField } from '../src/shared/csv.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

export interface CsvImportResult {
  rows: number;
  importRowsPerSec: number;
  copyRowsPerSec: number;
  /** import rate / COPY rate (1 = as fast as COPY). */
  ratio: number;
}

async function emptyContacts(db: Db): Promise<void> {
  await db.query('TRUNCATE contacts CASCADE');
  await db.query('VACUUM ANALYZE contacts');
}

/** The CSV import rate vs a raw COPY of the same rows, on `db` (its contacts table is emptied). */
export async function measureCsvImport(db: Db, opts: { rows?: number; rounds?: number } = {}): Promise<CsvImportResult> {
  const rows = opts.rows ?? 100_000;
  const rounds = opts.rounds ?? 2;
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-dashboard-'));
  chmodSync(dir, 0o755); // the server reads the COPY file
  try {
    const upload = join(dir, 'upload.csv');
    const copyFile = join(dir, 'copy.csv');
    const now = new Date().toISOString();
    const up = ['email,first_name,last_name'];
    const cp: string[] = [];
    for (let i = 1; i <= rows; i++) {
      const email = `reader${i}@bench${i % 50}.example`;
      up.push(`${email},First${i},Last ${i}`);
      cp.push([newId('ct'), email, `First${i}`, `Last ${i}`, 'import', now, now].map(csvField).join(','));
    }
    writeFileSync(upload, `${up.join('\n')}\n`);
    writeFileSync(copyFile, `${cp.join('\n')}\n`);
    chmodSync(copyFile, 0o644);

    const importer = new ContactImporter({ db, clock: systemClock, log: silentLogger });
    let bestImport = Infinity;
    let bestCopy = Infinity;
    for (let r = 0; r < rounds; r++) {
      await emptyContacts(db);
      let t = performance.now();
      await db.query(`COPY contacts (id, email, first_name, last_name, source, created_at, updated_at) FROM '${copyFile}' WITH (FORMAT csv)`);
      bestCopy = Math.min(bestCopy, performance.now() - t);

      await emptyContacts(db);
      t = performance.now();
      const id = await importer.accept(createReadStream(upload), 'bench');
      await importer.stop(); // waits for the background run
      bestImport = Math.min(bestImport, performance.now() - t);
      const done = (await db.query<{ state: string; imported: number }>(`SELECT state, imported FROM contact_imports WHERE id = $1`, [id])).rows[0]!;
      if (done.state !== 'done' || done.imported !== rows) throw new Error(`import ended ${done.state} with ${done.imported} rows`);
    }
    const importRowsPerSec = rows / (bestImport / 1000);
    const copyRowsPerSec = rows / (bestCopy / 1000);
    return { rows, importRowsPerSec, copyRowsPerSec, ratio: importRowsPerSec / copyRowsPerSec };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}


const N = Number(process.env.BENCH_CONTACTS ?? 1_000_000);
const RENDERS = Number(process.env.BENCH_RENDERS ?? 30);
const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const ADMIN_TOKEN = `bench_admin_${Date.now()}_0123456789abcdef`;
const ROOT = join(import.meta.dirname, '..');

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
  const pgDir = mkdtempSync(join(tmpdir(), 'lm-bench-dashboard-pg-'));
  const appDir = mkdtempSync(join(tmpdir(), 'lm-bench-dashboard-app-'));
  let embedded: EmbeddedStore | undefined;
  let app: Running | undefined;
  let db: Db | undefined;
  try {
    let url = process.env.DATABASE_URL;
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: pgDir, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    db = createPool(url, { max: 4 });
    await migrate(db);
    if (Number((await db.query('SELECT count(*) AS n FROM contacts')).rows[0].n) > 0) throw new Error('point DATABASE_URL at an empty database');

    const r = await measureCsvImport(db, { rows: Number(process.env.BENCH_IMPORT_ROWS ?? 100_000), rounds: Number(process.env.BENCH_ROUNDS ?? 2) });
    console.log(`\nCSV import, ${fmt(r.rows)} rows (best of rounds):`);
    console.log(`  import (spool + parse + validate + batched INSERT … ON CONFLICT): ${fmt(r.importRowsPerSec)} rows/s`);
    console.log(`  raw COPY of the same rows into the same table:                  ${fmt(r.copyRowsPerSec)} rows/s`);
    console.log(`  ratio import / COPY: ${fmt(r.ratio, 2)}  (goal: ≥ 10,000 rows/s absolute)`);
    await emptyContacts(db);

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
    rmSync(pgDir, { recursive: true, force: true });
    rmSync(appDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
