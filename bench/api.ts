/**
 * REST API benchmark (`npm run bench:api`). On its own embedded PostgreSQL (temporary
 * directory) or DATABASE_URL:
 *   1. seeds BENCH_CONTACTS (1,000,000) contacts with multi-row INSERT ... SELECT FROM unnest
 *      batches (triggers on, so counts and search words are written as the API writes them;
 *      secondary indexes dropped and rebuilt after, as pg_restore does), then VACUUM ANALYZE;
 *   2. starts the real backend (startLettermill, role backend) on loopback and measures over
 *      HTTP, one request at a time, p50/p95/p99 of: get by id, get by email, list page at the
 *      first, middle and last cursor, search with the commonest first name, the commonest last
 *      name, a rare full name and a full address, create;
 *   3. measures a bare Fastify route (same HTTP client, same process) for scale: latency and
 *      req/s at BENCH_CONCURRENCY, next to get-by-id at the same concurrency.
 * Requests rotate over 200 API keys, so every request passes the real auth and token-bucket
 * path without being throttled (10/s per key). Environment: DATABASE_URL, BENCH_CONTACTS,
 * BENCH_REQUESTS (300 per operation), BENCH_CONCURRENCY (8).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { signListCursor } from '../src/backend/api/contact-list.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { startLettermill, type Running } from '../src/runtime/boot.js';
import { newId } from '../src/shared/crypto.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';
import { loadSigner } from '../src/shared/signing.js';

const N = Number(process.env.BENCH_CONTACTS ?? 1_000_000);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 300);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const BATCH = 10_000;
const SEED_PARALLEL = 3;
const ADMIN_TOKEN = `bench_admin_${Date.now()}_0123456789abcdef`;

const FIRST = ('james mary robert patricia john jennifer michael linda david elizabeth william barbara richard susan joseph jessica thomas sarah christopher karen ' +
  'charles lisa daniel nancy matthew betty anthony sandra mark margaret donald ashley steven kimberly andrew emily paul donna joshua michelle kenneth carol ' +
  'kevin amanda brian melissa george deborah timothy stephanie ronald rebecca jason sharon edward laura jeffrey cynthia ryan dorothy jacob amy gary kathleen ' +
  'nicholas angela eric shirley jonathan emma stephen brenda larry pamela justin nicole scott anna brandon samantha benjamin katherine samuel christine ' +
  'gregory debra alexander rachel patrick carolyn frank janet raymond maria jack olivia dennis heather jerry helen tyler catherine aaron diane jose julie ' +
  'adam victoria nathan joyce henry lauren zachary kelly douglas christina peter ruth kyle joan noah virginia ethan judith jeremy evelyn christian hannah ' +
  'walter andrea keith megan austin cheryl roger jacqueline terry martha sean madison gerald teresa carl kathryn dylan sara harold janice jordan julia jesse ' +
  'grace bryan judy lawrence theresa arthur rose gabriel beverly bruce denise logan marilyn billy amber joe danielle alan brittany juan diana elijah abigail ' +
  'willie jane albert natalie wayne lori randy tiffany mason alexis vincent kayla liam sophia roy frances bobby charlotte caleb marie bradley isabella').split(' ');
const LAST = ('smith johnson williams brown jones garcia miller davis rodriguez martinez hernandez lopez gonzalez wilson anderson thomas taylor moore jackson ' +
  'martin lee perez thompson white harris sanchez clark ramirez lewis robinson walker young allen king wright scott torres nguyen hill flores green adams ' +
  'nelson baker hall rivera campbell mitchell carter roberts gomez phillips evans turner diaz parker cruz edwards collins reyes stewart morris morales murphy ' +
  'cook rogers gutierrez ortiz morgan cooper peterson bailey reed kelly howard ramos kim cox ward richardson watson brooks chavez wood james bennett gray ' +
  'mendoza ruiz hughes price alvarez castillo sanders patel myers long ross foster jimenez powell jenkins perry russell sullivan bell coleman butler ' +
  'henderson barnes gonzales fisher vasquez simmons romero jordan patterson alexander hamilton graham reynolds griffin wallace moreno west cole hayes bryant ' +
  'herrera gibson ellis tran medina aguilar stevens murray ford castro marshall owens harrison fernandez mcdonald woods washington kennedy wells vargas henry ' +
  'chen freeman webb tucker guzman burns crawford olson simpson porter hunter gordon mendez silva shaw snyder mason dixon munoz hunt hicks holmes palmer ' +
  'wagner black robertson boyd rose stone salazar fox warren mills meyer rice schmidt garza daniels ferguson nichols stephens soto weaver ryan gardner payne ' +
  'grant dunn kelley spencer hawkins arnold pierce vazquez hansen peters santos hart bradley knight elliott cunningham duncan armstrong hudson carroll lane ' +
  'riley andrews alvarado ray delgado berry perkins hoffman johnston matthews pena richards contreras willis carpenter lawrence sandoval').split(' ');
const DOMAINS = ['gmail.com', 'gmail.com', 'gmail.com', 'yahoo.com', 'outlook.com', 'hotmail.com', 'icloud.com', 'proton.me', 'aol.com'];

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const cap = (s: string) => s[0].toUpperCase() + s.slice(1);

/** Deterministic PRNG, so every run seeds the same data. Names are skewed like real ones: the commonest first name is ~3 % of contacts. */
function rng(seed: number) {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x80000000;
  };
}

/**
 * A bulk import as pg_restore does it: the secondary indexes of contacts and of its search
 * words (read back from the catalog, so they are exactly the migrations'; the search words'
 * primary key included) are dropped, the rows inserted (triggers on, so the search words are
 * written as the API writes them), the indexes rebuilt.
 */
async function seedBulk(db: Db): Promise<{ insertMs: number; indexMs: number }> {
  const indexes = (
    await db.query<{ name: string; def: string }>(
      `SELECT i.indexname AS name, i.indexdef AS def FROM pg_indexes i
        WHERE i.tablename IN ('contacts', 'contact_search_words')
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = (quote_ident(i.schemaname) || '.' || quote_ident(i.indexname))::regclass)`,
    )
  ).rows;
  const keys = (
    await db.query<{ name: string; def: string }>(
      `SELECT conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = 'contact_search_words'::regclass AND contype IN ('p', 'u')`,
    )
  ).rows;
  for (const d of indexes) await db.query(`DROP INDEX ${d.name}`);
  for (const k of keys) await db.query(`ALTER TABLE contact_search_words DROP CONSTRAINT ${k.name}`);
  const inserted = await seed(db);
  const t = performance.now();
  const builds = [...indexes.map((d) => d.def), ...keys.map((k) => `ALTER TABLE contact_search_words ADD CONSTRAINT ${k.name} ${k.def}`)];
  await Promise.all(
    builds.map(async (sql) => {
      const c = await db.connect();
      try {
        await c.query(`SET maintenance_work_mem = '256MB'`);
        await c.query(sql);
      } finally {
        c.release();
      }
    }),
  );
  return { insertMs: inserted.ms, indexMs: performance.now() - t };
}

async function seed(db: Db): Promise<{ ms: number; rate: number }> {
  const rnd = rng(42);
  const pick = <T>(a: T[], skew = 1.5) => a[Math.floor(a.length * Math.pow(rnd(), skew))];
  const base = Date.UTC(2024, 0, 1);
  const started = performance.now();
  const conns = await Promise.all(Array.from({ length: SEED_PARALLEL }, () => db.connect()));
  const inflight: Promise<unknown>[] = [];
  let turn = 0;
  for (let b = 0; b < N; b += BATCH) {
    const ids: string[] = [];
    const emails: string[] = [];
    const firsts: string[] = [];
    const lasts: string[] = [];
    const times: Date[] = [];
    for (let i = b; i < Math.min(N, b + BATCH); i++) {
      const f = pick(FIRST);
      const l = pick(LAST);
      const domain = rnd() < 0.2 ? `${pick(LAST, 1)}-corp${Math.floor(rnd() * 5000)}.com` : DOMAINS[Math.floor(rnd() * DOMAINS.length)];
      const style = Math.floor(rnd() * 4);
      const local = style === 0 ? `${f}.${l}` : style === 1 ? `${f[0]}${l}` : style === 2 ? `${f}_${l}` : `${f}${l}`;
      const t = base + i * 30_000; // one sign-up every 30 s over the past year
      ids.push(newId('ct', t));
      emails.push(`${local}${i.toString(36)}@${domain}`);
      firsts.push(cap(f));
      lasts.push(cap(l));
      times.push(new Date(t));
    }
    inflight.push(
      conns[turn++ % SEED_PARALLEL].query(
        `INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at)
         SELECT id, email, f, l, 'api', t, t FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS u(id, email, f, l, t)`,
        [ids, emails, firsts, lasts, times],
      ),
    );
    if (inflight.length >= SEED_PARALLEL) await inflight.shift();
  }
  await Promise.all(inflight);
  for (const c of conns) c.release();
  const ms = performance.now() - started;
  return { ms, rate: N / (ms / 1000) };
}

interface Stats {
  p50: number;
  p95: number;
  p99: number;
  n: number;
}
function stats(samples: number[]): Stats {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { p50: q(0.5), p95: q(0.95), p99: q(0.99), n: s.length };
}

async function timeSequential(n: number, fn: (i: number) => Promise<void>, warmup = 20): Promise<Stats> {
  for (let i = 0; i < warmup; i++) await fn(-1 - i);
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn(i);
    samples.push(performance.now() - t);
  }
  return stats(samples);
}

async function throughput(durationMs: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<number> {
  let count = 0;
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) await fn(count++);
    }),
  );
  return count / ((performance.now() - start) / 1000);
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'lm-bench-api-'));
  const appDir = mkdtempSync(join(tmpdir(), 'lm-bench-api-app-'));
  let embedded: EmbeddedStore | undefined;
  let app: Running | undefined;
  let db: Db | undefined;
  const bare = Fastify({ logger: false });
  try {
    let url = process.env.DATABASE_URL;
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger });
      url = embedded.url;
    }
    db = createPool(url, { max: 8 });
    await migrate(db);
    const existing = Number((await db.query('SELECT count(*) AS n FROM contacts')).rows[0].n);
    if (existing > 0) throw new Error(`the database already has ${existing} contacts; point DATABASE_URL at an empty database`);

    console.log(`Seeding ${fmt(N)} contacts: multi-row INSERT ... FROM unnest (batches of ${fmt(BATCH)}, ${SEED_PARALLEL} connections), secondary indexes rebuilt after...`);
    const seeded = await seedBulk(db);
    const t0 = performance.now();
    await db.query('VACUUM ANALYZE contacts');
    await db.query('VACUUM ANALYZE contact_search_words');
    const analyzeMs = performance.now() - t0;
    const size = (
      await db.query(
        `SELECT pg_size_pretty(pg_total_relation_size('contacts')) AS c, pg_size_pretty(pg_total_relation_size('contact_search_words')) AS w`,
      )
    ).rows[0];
    const seedRate = N / (seeded.insertMs / 1000);
    const overallRate = N / ((seeded.insertMs + seeded.indexMs) / 1000);
    console.log(
      `  insert ${fmt(seedRate)} rows/s (${fmt(seeded.insertMs / 1000, 1)} s); index build ${fmt(seeded.indexMs / 1000, 1)} s; ` +
        `overall ${fmt(overallRate)} rows/s; VACUUM ANALYZE ${fmt(analyzeMs / 1000, 1)} s; contacts with indexes ${size.c}, search words with indexes ${size.w}`,
    );

    app = await startLettermill({
      role: 'backend',
      announce: () => {},
      log: silentLogger,
      env: { NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: url, HOST: '127.0.0.1', PORT: '0', DATA_DIR: appDir, ADMIN_TOKEN, BASE_URL: 'http://bench.test' },
    });
    const base = app.backendUrl!.replace('localhost', '127.0.0.1');
    const keys: string[] = [];
    for (let i = 0; i < 200; i++) {
      const r = await fetch(`${base}/admin/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ scopes: ['contacts:read', 'contacts:write'] }),
      });
      keys.push(((await r.json()) as any).data.key);
    }
    let k = 0;
    const get = async (path: string, expectStatus = 200) => {
      const r = await fetch(base + path, { headers: { authorization: `Bearer ${keys[k++ % keys.length]}` } });
      const body = await r.text();
      if (r.status !== expectStatus) throw new Error(`${path}: ${r.status} ${body.slice(0, 200)}`);
      return body;
    };

    // Each key's first use records last_used_at; a steady client has long paid that: pay it now.
    for (let i = 0; i < keys.length; i++) await get('/api/v1/contacts?limit=1');
    const sample = (await db.query<{ id: string; email: string }>(`SELECT id, email FROM contacts TABLESAMPLE SYSTEM (1) LIMIT 2000`)).rows;
    const idAt = async (offset: number) => (await db!.query<{ id: string }>(`SELECT id FROM contacts ORDER BY id DESC OFFSET $1 LIMIT 1`, [offset])).rows[0].id;
    const signer = await loadSigner(db);
    const expires = Date.now() + 3600_000;
    const middle = signListCursor(signer, await idAt(Math.floor(N / 2)), expires);
    const last = signListCursor(signer, await idAt(N - 26), expires);
    const lastPage = JSON.parse(await get(`/api/v1/contacts?limit=25&cursor=${encodeURIComponent(last)}`));
    if (!lastPage.pagination.isDone || lastPage.data.length !== 25) throw new Error('the last-cursor page is not the last page');
    const common = (await db.query<{ f: string; n: number }>(`SELECT lower(first_name) AS f, count(*) AS n FROM contacts GROUP BY 1 ORDER BY 2 DESC LIMIT 1`)).rows[0];
    const commonLast = (await db.query<{ l: string }>(`SELECT lower(last_name) AS l FROM contacts GROUP BY 1 ORDER BY count(*) DESC LIMIT 1`)).rows[0].l;
    // A rare search is a person's full name: the least frequent first + last name pair.
    const rare = (
      await db.query<{ l: string; n: number }>(
        `SELECT lower(first_name) || ' ' || lower(last_name) AS l, count(*) AS n FROM contacts GROUP BY 1 ORDER BY 2, 1 LIMIT 1`,
      )
    ).rows[0];
    const commonMatches = JSON.parse(await get(`/api/v1/contacts?search=${common.f}&limit=1`)).pagination.totalItems;
    const rareMatches = JSON.parse(await get(`/api/v1/contacts?search=${encodeURIComponent(rare.l)}&limit=1`)).pagination.totalItems;
    const commonLastMatches = JSON.parse(await get(`/api/v1/contacts?search=${commonLast}&limit=1`)).pagination.totalItems;
    const exactEmail = sample[7].email;

    const ops: [string, number | null, (i: number) => Promise<unknown>][] = [
      ['get by id', 5, (i) => get(`/api/v1/contacts/${sample[Math.abs(i) % sample.length].id}`)],
      ['get by email', 5, (i) => get(`/api/v1/contacts/${encodeURIComponent(sample[Math.abs(i) % sample.length].email.toUpperCase())}`)],
      ['list page, first (limit 25)', 20, () => get('/api/v1/contacts?limit=25')],
      ['list page, middle cursor', 20, () => get(`/api/v1/contacts?limit=25&cursor=${encodeURIComponent(middle)}`)],
      ['list page, last cursor', 20, () => get(`/api/v1/contacts?limit=25&cursor=${encodeURIComponent(last)}`)],
      [`search common "${common.f}" (${fmt(commonMatches)} matches)`, 50, () => get(`/api/v1/contacts?search=${common.f}&limit=25`)],
      [`search common "${commonLast}" (${fmt(commonLastMatches)} matches)`, 50, () => get(`/api/v1/contacts?search=${commonLast}&limit=25`)],
      [`search rare "${rare.l}" (${fmt(rareMatches)} matches)`, 50, () => get(`/api/v1/contacts?search=${encodeURIComponent(rare.l)}&limit=25`)],
      ['search by a full email address', 50, () => get(`/api/v1/contacts?search=${encodeURIComponent(exactEmail)}&limit=25`)],
      [
        'create',
        null,
        async (i) => {
          const r = await fetch(`${base}/api/v1/contacts`, {
            method: 'POST',
            headers: { authorization: `Bearer ${keys[k++ % keys.length]}`, 'content-type': 'application/json' },
            body: JSON.stringify({ email: `bench-new-${i + 100}-${Date.now()}@bench.example`, firstName: 'Bench', lastName: 'New' }),
          });
          await r.text();
          if (r.status !== 201) throw new Error(`create: ${r.status}`);
        },
      ],
    ];

    bare.get('/ping', async () => ({ data: { ok: true } }));
    await bare.listen({ host: '127.0.0.1', port: 0 });
    const bareUrl = `http://127.0.0.1:${(bare.server.address() as { port: number }).port}/ping`;
    const ping = async () => {
      await (await fetch(bareUrl)).text();
    };
    const bareLatency = await timeSequential(REQUESTS, ping);

    console.log(`\nOver HTTP, one request at a time, ${REQUESTS} requests per operation after 20 warm-up (ms):`);
    console.log(`  ${'operation'.padEnd(44)} ${'p50'.padStart(7)} ${'p95'.padStart(7)} ${'p99'.padStart(7)}  ${'p50/bare'.padStart(8)}  goal p95`);
    const line = (name: string, s: Stats, goal: number | null) =>
      console.log(
        `  ${name.padEnd(44)} ${fmt(s.p50, 2).padStart(7)} ${fmt(s.p95, 2).padStart(7)} ${fmt(s.p99, 2).padStart(7)}  ${(fmt(s.p50 / bareLatency.p50, 1) + 'x').padStart(8)}  ${
          goal === null ? '-' : `< ${goal}  ${s.p95 < goal ? 'met' : 'MISSED'}`
        }`,
      );
    line('bare Fastify route (baseline)', bareLatency, null);
    for (const [name, goal, fn] of ops) line(name, await timeSequential(REQUESTS, async (i) => void (await fn(i))), goal);

    const bareRps = await throughput(3000, CONCURRENCY, ping);
    const getRps = await throughput(3000, CONCURRENCY, (i) => get(`/api/v1/contacts/${sample[i % sample.length].id}`).then(() => {}));
    console.log(`\nThroughput at concurrency ${CONCURRENCY} (3 s each):`);
    console.log(`  bare Fastify route     ${fmt(bareRps).padStart(7)} req/s`);
    console.log(`  GET /api/v1/contacts/:id ${fmt(getRps).padStart(5)} req/s  (${fmt((getRps / bareRps) * 100, 1)}% of bare; auth + rate limit + PostgreSQL)`);
    console.log(
      `\nSeeding: insert ${fmt(seedRate)} rows/s, ${fmt(overallRate)} rows/s including the index build (goal >= 20,000: ${overallRate >= 20_000 ? 'met' : 'MISSED'})`,
    );
  } finally {
    await bare.close().catch(() => {});
    await app?.stop().catch(() => {});
    await db?.end().catch(() => {});
    await embedded?.stop().catch(() => {});
    rmSync(tmp, { recursive: true, force: true });
    rmSync(appDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
