/**
 * Tracking benchmark (`npm run bench:tracking`). In one run, with load from a separate
 * process (wrk, Debian package `wrk`):
 *   (a) a bare Fastify route serving the same 1×1 GIF — the baseline;
 *   (b) GET /t/o/:emailSendId on the real backend with recording on (rate limiter, machine
 *       classification, batched writes to PostgreSQL), over 10,000 distinct sends;
 *   (c) GET /t/c/:emailSendId/:encodedUrl (signature check, 302, click rows written).
 * Afterwards the backend is stopped cleanly and the database is checked: every answered hit
 * must be recorded. Environment: DATABASE_URL (else an embedded PostgreSQL), BENCH_SECONDS
 * (10), BENCH_CONNECTIONS (64), BENCH_SENDS (10000).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startLettermill } from '../src/runtime/boot.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { loadSigner } from '../src/shared/signing.js';
import { LinkSigner } from '../src/backend/public/tracked-links.js';
import { PIXEL_GIF } from '../src/backend/public/tracking.js';
import { createPool } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createHttpApp, boundPort } from '../src/shared/http.js';
import { silentLogger } from '../src/shared/log.js';

const run = promisify(execFile);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const SENDS = Number(process.env.BENCH_SENDS ?? 10_000);
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

interface WrkResult {
  rps: number;
  requests: number;
  non2xx3xx: number;
  errors: number;
  latencyP99: string;
}

/** wrk with a Lua script that walks a list of paths (so hits spread over many sends). */
async function wrk(url: string, paths: string[], dir: string, name: string, seconds = SECONDS): Promise<WrkResult> {
  const list = join(dir, `${name}.txt`);
  writeFileSync(list, paths.join('\n') + '\n');
  const script = join(dir, `${name}.lua`);
  writeFileSync(
    script,
    `local paths = {}
for line in io.lines("${list}") do paths[#paths + 1] = line end
local i = 0
request = function()
  i = i + 1
  if i > #paths then i = 1 end
  return wrk.format("GET", paths[i], { ["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36" })
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %s\\n", summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, latency:percentile(99)))
end
`,
  );
  const { stdout } = await run('wrk', ['-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency', '-s', script, url], { maxBuffer: 1 << 20 });
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? 0);
  const m = /RESULT (\d+) (\d+) (\d+) ([\d.]+)/.exec(stdout);
  return { rps, requests: Number(m?.[1] ?? 0), non2xx3xx: Number(m?.[2] ?? 0), errors: Number(m?.[3] ?? 0), latencyP99: `${(Number(m?.[4] ?? 0) / 1000).toFixed(2)} ms` };
}

async function main(): Promise<void> {
  try {
    await run('wrk', ['--version']).catch((e: { stdout?: string }) => {
      if (!e.stdout?.includes('wrk')) throw new Error('wrk is not installed (apt-get install -y wrk)');
    });
  } catch (err) {
    console.error((err as Error).message);
    process.exit(2);
  }
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-tracking-'));
  const pgDir = mkdtempSync(join(tmpdir(), 'lm-bench-tracking-pg-'));
  let embedded: EmbeddedStore | undefined;
  let url = process.env.DATABASE_URL;
  try {
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: pgDir, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const pool = createPool(url, { max: 4 });
    await migrate(pool);
    await pool.query('TRUNCATE email_engagement, email_clicks, email_sends CASCADE');
    const now = Date.now() - 3_600_000;
    const ids = Array.from({ length: SENDS }, (_, i) => `snd_bench${String(i).padStart(8, '0')}`);
    await pool.query(
      `INSERT INTO email_sends (id, type, campaign_id, to_email, from_email, subject, provider, status, created_at, updated_at)
       SELECT id, 'campaign', 'cmp_bench', 'r' || ord || '@bench.test', 'news@bench.test', 'Bench', 'mta', 'accepted', $2, $2
         FROM unnest($1::text[]) WITH ORDINALITY AS t(id, ord)`,
      [ids, new Date(now).toISOString()],
    );
    const rows = ids.map((id) => ({ emailSendId: id }));
    const signer = new LinkSigner(await loadSigner(pool));

    // (a) baseline: the same GIF from a bare Fastify route (same Fastify factory, nothing else).
    const bare = createHttpApp({ log: silentLogger });
    bare.get('/t/o/:emailSendId', async (_req, reply) =>
      reply.code(200).headers({ 'content-type': 'image/gif', 'cache-control': 'no-store, no-cache, must-revalidate, private, max-age=0' }).send(PIXEL_GIF),
    );
    await bare.listen({ host: '127.0.0.1', port: 0 });
    const openPaths = rows.map((r) => `/t/o/${r.emailSendId}`);
    const clickPaths = rows.map((r, i) => `/t/c/${r.emailSendId}/${signer.encode(r.emailSendId, `https://shop.bench.test/product/${i % 97}?utm_source=bench`)}`);
    await wrk(`http://127.0.0.1:${boundPort(bare)}`, openPaths.slice(0, 100), dir, 'warm-bare', 2);
    const baseline = await wrk(`http://127.0.0.1:${boundPort(bare)}`, openPaths, dir, 'bare');
    await bare.close();

    // (b), (c): the real backend.
    const port = await freePort();
    const app = await startLettermill({
      role: 'backend',
      announce: () => {},
      log: silentLogger,
      env: {
        NODE_ENV: 'test',
        LOG_LEVEL: 'silent',
        HOST: '127.0.0.1',
        PORT: String(port),
        DATA_DIR: join(dir, 'data'),
        DATABASE_URL: url,
        BASE_URL: `http://127.0.0.1:${port}`,
        // The limiter stays in the path; one loopback client must not be throttled.
        PUBLIC_RATE_LIMITS: 'tracking=100000000/6000000000',
      },
    });
    const base = `http://127.0.0.1:${port}`;
    const warmup = await wrk(base, openPaths.slice(0, 100), dir, 'warm-open', 2);
    const opens = await wrk(base, openPaths, dir, 'open');
    const clicks = await wrk(base, clickPaths, dir, 'click');
    const stopStart = performance.now();
    await app.stop(); // writes whatever is still buffered
    const stopMs = performance.now() - stopStart;

    const counts = (await pool.query<{ opens: number; clicks: number }>('SELECT sum(opens)::int AS opens, sum(clicks)::int AS clicks FROM email_engagement')).rows[0]!;
    const clickRows = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM email_clicks')).rows[0]!.n;
    await pool.end();

    const warm = warmup.requests; // the warm-up run's hits are recorded too; they are not in the figures
    const lines = [
      `bench:tracking — wrk -t1 -c${CONNECTIONS} -d${SECONDS}s from a separate process, ${fmt(SENDS)} distinct sends`,
      `  bare Fastify GIF route     ${fmt(baseline.rps)} req/s   (p99 ${baseline.latencyP99})`,
      `  opens  /t/o (recording on) ${fmt(opens.rps)} opens/s  = ${fmt(opens.rps / baseline.rps, 2)} × bare   (p99 ${opens.latencyP99}, non-2xx ${opens.non2xx3xx}, socket errors ${opens.errors})`,
      `  clicks /t/c (recording on) ${fmt(clicks.rps)} clicks/s = ${fmt(clicks.rps / baseline.rps, 2)} × bare   (p99 ${clicks.latencyP99}, non-3xx ${clicks.non2xx3xx}, socket errors ${clicks.errors})`,
      `  recorded in PostgreSQL: ${fmt(counts.opens)} opens for ${fmt(opens.requests + warm)} answered (warm-up included), ${fmt(clickRows)} click rows / ${fmt(counts.clicks)} counted for ${fmt(clicks.requests)} answered`,
      `  final flush at shutdown took ${fmt(stopMs)} ms`,
      `  goals: ≥ 10,000 opens/s → ${opens.rps >= 10_000 ? 'met' : 'NOT met'}; ≥ 0.5 × bare → ${opens.rps / baseline.rps >= 0.5 ? 'met' : 'NOT met'}`,
    ];
    console.log(lines.join('\n'));
    const lost = opens.requests + warm - counts.opens;
    if (lost > 0 || clicks.requests - clickRows > 0) {
      console.log(`  NOTE: answered but not recorded: opens ${lost}, clicks ${clicks.requests - clickRows}`);
    }
  } finally {
    await embedded?.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    rmSync(pgDir, { recursive: true, force: true });
  }
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
