/**
 * Campaign benchmark (`npm run bench:campaign`): the time to hand 100,000 recipients to the
 * provider and the backend's peak RSS. The provider is an HTTP receiver on loopback acting as
 * the MTA (`POST /send` → 202), in a separate process; the backend runs in this process with
 * EMAIL_PROVIDER=mta, on an embedded PostgreSQL (or DATABASE_URL).
 * Baseline in the same run: the same number of bare jobs POSTed to the same receiver with the
 * same keep-alive client and concurrency (no database, no rendering): the hand-off ceiling.
 * Environment: BENCH_RECIPIENTS (100000), DATABASE_URL.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MtaBulkTransport } from '../src/backend/campaigns/transport.js';
import { FANOUT } from '../src/backend/campaigns/policy.js';
import { startLettermill } from '../src/runtime/boot.js';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { createPool } from '../src/shared/db/pool.js';
import { migrate } from '../src/shared/db/migrate.js';
import { silentLogger } from '../src/shared/log.js';

const N = Number(process.env.BENCH_RECIPIENTS ?? 100_000);
const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
const MB = 1024 * 1024;

// The receiver: counts jobs and distinct messageIds; answers like the MTA.
const RECEIVER = `
const http = require('node:http');
const ids = new Set(); let jobs = 0;
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.url === '/stats') { res.end(JSON.stringify({ jobs, unique: ids.size })); return; }
    if (req.url === '/reset') { ids.clear(); jobs = 0; res.end('{}'); return; }
    const job = JSON.parse(Buffer.concat(chunks).toString());
    jobs++; ids.add(job.messageId);
    res.writeHead(202, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ data: { jobId: String(jobs), messageId: job.messageId, status: 'queued' } }));
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => process.send(server.address().port));
`;

async function stats(url: string): Promise<{ jobs: number; unique: number }> {
  return (await fetch(`${url}/stats`)).json() as Promise<{ jobs: number; unique: number }>;
}

const HTML = `<!doctype html><html><body style="margin:0;background:#f4f4f4">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0"><tr><td align="center">
<table role="presentation" width="600" style="background:#fff;font-family:Arial,sans-serif">
<tr><td style="padding:24px"><img src="https://cdn.acme.example/logo.png" width="120" alt="Acme"></td></tr>
<tr><td style="padding:0 24px"><h1>This week at Acme</h1>
${Array.from({ length: 6 }, (_, i) => `<h2>Story ${i + 1}</h2><p>${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(6)}</p><p><a href="https://acme.example/stories/${i + 1}?utm_source=newsletter&amp;utm_medium=email">Read more</a></p>`).join('\n')}
</td></tr>
<tr><td style="padding:24px"><a href="https://twitter.example/acme">Twitter</a> · <a href="https://acme.example/">Website</a></td></tr>
</table></td></tr></table></body></html>`;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-campaign-'));
  const pgDir = mkdtempSync(join(tmpdir(), 'lm-bench-campaign-pg-'));
  const receiverFile = join(dir, 'receiver.cjs');
  writeFileSync(receiverFile, RECEIVER);
  const child = fork(receiverFile, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let embedded: EmbeddedStore | undefined;
  try {
    const port = await new Promise<number>((resolve) => child.once('message', (p) => resolve(p as number)));
    const mtaUrl = `http://127.0.0.1:${port}`;

    let url = process.env.DATABASE_URL;
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: pgDir, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const pool = createPool(url, { max: 4 });
    await migrate(pool);

    // Baseline: bare jobs through the same client and concurrency, in a child process of its
    // own (so this process's memory is the backend's alone).
    const bareMs = await new Promise<number>((resolve, reject) => {
      const c = fork(new URL(import.meta.url).pathname, [], { env: { ...process.env, LM_BENCH_BASELINE: mtaUrl }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      c.once('message', (ms) => resolve(ms as number));
      c.once('exit', (code) => (code ? reject(new Error(`baseline exited with ${code}`)) : undefined));
    });
    await fetch(`${mtaUrl}/reset`);

    // Seed: N members of one topic (plus the REST API's own rows), in bulk.
    const seedStart = performance.now();
    const now = new Date().toISOString();
    await pool.query(`INSERT INTO topics (id, name, require_double_opt_in, created_at, updated_at) VALUES ('tp_bench', 'Bench list', false, $1, $1)`, [now]);
    await pool.query(
      `INSERT INTO contacts (id, email, first_name, source, created_at, updated_at)
       SELECT 'ct_' || lpad(i::text, 8, '0'), 'r' || i || '@bench.example', 'Reader', 'api', $1, $1 FROM generate_series(1, $2) i`,
      [now, N],
    );
    await pool.query(
      `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at)
       SELECT 'tp_bench', 'ct_' || lpad(i::text, 8, '0'), 'not_required', 'api', $1, $1 FROM generate_series(1, $2) i`,
      [now, N],
    );
    await pool.query('ANALYZE');
    const seedMs = performance.now() - seedStart;

    const backendPort = 30_000 + Math.floor(Math.random() * 20_000);
    const app = await startLettermill({
      role: 'backend',
      announce: () => {},
      log: silentLogger,
      env: {
        NODE_ENV: 'test',
        LOG_LEVEL: 'silent',
        HOST: '127.0.0.1',
        PORT: String(backendPort),
        DATA_DIR: join(dir, 'data'),
        DATABASE_URL: url,
        BASE_URL: 'https://mail.acme.example',
        ADMIN_TOKEN: 'bench-admin-token',
        EMAIL_PROVIDER: 'mta',
        MTA_URL: mtaUrl,
        MTA_API_KEY: 'k',
      },
    });
    const base = `http://127.0.0.1:${backendPort}`;
    const admin = { authorization: 'Bearer bench-admin-token', 'content-type': 'application/json' };
    const created = (await (
      await fetch(`${base}/admin/campaigns`, {
        method: 'POST',
        headers: admin,
        body: JSON.stringify({ subject: 'This week at Acme', html: HTML, text: 'This week at Acme: https://acme.example/', from: 'Acme <news@acme.example>', topicId: 'tp_bench' }),
      })
    ).json()) as { data: { id: string } };

    global.gc?.();
    const rssBefore = process.memoryUsage().rss;
    let peak = rssBefore;
    let atPeak = process.memoryUsage();
    const sampler = setInterval(() => {
      const m = process.memoryUsage();
      if (m.rss > peak) {
        peak = m.rss;
        atPeak = m;
      }
    }, 25);
    const start = performance.now();
    const sendRes = await fetch(`${base}/admin/campaigns/${created.data.id}/send`, { method: 'POST', headers: { authorization: admin.authorization } });
    const accepted = (await sendRes.json()) as { data: { recipients: number } };
    const acceptMs = performance.now() - start;
    let handedMs = 0;
    for (;;) {
      const s = await stats(mtaUrl);
      if (s.unique >= N && !handedMs) handedMs = performance.now() - start;
      const st = (await pool.query<{ status: string }>('SELECT status FROM campaigns WHERE id = $1', [created.data.id])).rows[0]!.status;
      if (st === 'sent' && handedMs) break;
      if (performance.now() - start > 600_000) throw new Error('campaign did not finish in 10 minutes');
      await new Promise((r) => setTimeout(r, 50));
    }
    const doneMs = performance.now() - start;
    clearInterval(sampler);
    const final = await stats(mtaUrl);
    await app.stop();
    await pool.end();
    const maxRss = process.resourceUsage().maxRSS * 1024;

    console.log(
      [
        `bench:campaign — ${fmt(N)} recipients, ${fmt(Buffer.byteLength(HTML) / 1024, 1)} KB HTML with ${(HTML.match(/href=/g) ?? []).length} links, EMAIL_PROVIDER=mta → loopback receiver (separate process)`,
        `  baseline: ${fmt(N)} bare jobs, same client and concurrency (${FANOUT.concurrency})   ${fmt(bareMs / 1000, 2)} s = ${fmt(N / (bareMs / 1000))} jobs/s`,
        `  campaign: POST /send answered 202 in ${fmt(acceptMs)} ms (recipients ${fmt(accepted.data.recipients)})`,
        `  campaign: all ${fmt(N)} handed to the provider in ${fmt(handedMs / 1000, 2)} s = ${fmt(N / (handedMs / 1000))} recipients/s = ${fmt(handedMs / bareMs, 2)} × baseline time; campaign marked sent after ${fmt(doneMs / 1000, 2)} s`,
        `  receiver saw ${fmt(final.jobs)} jobs, ${fmt(final.unique)} distinct messageIds`,
        `  RSS: ${fmt(rssBefore / MB)} MB before the send, peak ${fmt(peak / MB)} MB during it (sampled; then V8 heap ${fmt(atPeak.heapUsed / MB)} used of ${fmt(atPeak.heapTotal / MB)} MB, external ${fmt(atPeak.external / MB)} MB); process maxRSS ${fmt(maxRss / MB)} MB`,
        `  seeding ${fmt(N)} contacts + memberships took ${fmt(seedMs / 1000, 1)} s (not counted)`,
        `  goals: ≤ 20 s → ${handedMs <= 20_000 ? 'met' : 'NOT met'}; ≤ 256 MB → ${peak <= 256 * MB ? 'met' : 'NOT met'}`,
      ].join('\n'),
    );
  } finally {
    child.kill();
    await embedded?.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    rmSync(pgDir, { recursive: true, force: true });
  }
}

/** The baseline child: N bare jobs through MtaBulkTransport; reports the elapsed ms. */
async function baseline(mtaUrl: string): Promise<void> {
  const client = new MtaBulkTransport({ url: mtaUrl, apiKey: 'k', organizationId: 'default', timeoutMs: 30_000, sockets: FANOUT.concurrency });
  const start = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: FANOUT.concurrency }, async () => {
      while (next < N) {
        const i = next++;
        await client.send({ id: `bare${i}`, to: `r${i}@bench.example`, from: 'news@acme.example', subject: 'Bare', html: HTML, headers: {}, dkimDomain: 'acme.example', campaignId: 'bare' });
      }
    }),
  );
  process.send!(performance.now() - start);
  client.close();
  process.disconnect();
}

if (process.env.LM_BENCH_BASELINE) {
  void baseline(process.env.LM_BENCH_BASELINE);
} else void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
