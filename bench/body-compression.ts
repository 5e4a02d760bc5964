/**
 * The 100 KB body's durable path (`npm run bench:body-compression`, issue 26): what it costs
 * PostgreSQL to store the queue's payload (the /send JSON with the HTML body) in a default text
 * column (TOAST with pglz), out of line uncompressed (the queue before migration 075), with TOAST
 * lz4 (`SET COMPRESSION lz4`), and
 * compressed by us before the insert (zlib deflateRaw level 1, brotli quality 1) into a bytea
 * column PostgreSQL does not compress again (STORAGE EXTERNAL). For each: insert rate
 * (BENCH_ROWS rows, multi-row statements of 50 as the queue's enqueue does, one writer),
 * WAL bytes and table bytes per row, and our own CPU to compress and decompress one payload.
 * Runs on an embedded PostgreSQL in a temp dir (DATABASE_URL to use another server).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, brotliDecompressSync, constants, deflateRawSync, inflateRawSync } from 'node:zlib';
import { startEmbeddedPostgres, type EmbeddedStore } from '../src/runtime/embedded-postgres.js';
import { createPool, type Db } from '../src/shared/db/pool.js';
import { silentLogger } from '../src/shared/log.js';
import { benchJob } from './mta-e2e.js';
import { htmlBody, variedHtml } from './mta.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 3000);
const BYTES = Number(process.env.BENCH_BODY_BYTES ?? 100 * 1024);
const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

interface Codec {
  name: string;
  column: string;
  /** STORAGE EXTERNAL (bytea always: it is compressed already). */
  external?: boolean;
  encode: (s: string) => string | Buffer;
  decode: (b: Buffer) => string;
}

const CODECS: Codec[] = [
  { name: 'text, TOAST pglz (a default text column)', column: 'text', encode: (s) => s, decode: (b) => b.toString() },
  { name: 'text, STORAGE EXTERNAL (the queue before migration 075)', column: 'text', external: true, encode: (s) => s, decode: (b) => b.toString() },
  { name: 'text, TOAST lz4', column: 'text COMPRESSION lz4', encode: (s) => s, decode: (b) => b.toString() },
  { name: 'bytea, deflateRaw level 1 (ours), STORAGE EXTERNAL', column: 'bytea', encode: (s) => deflateRawSync(s, { level: 1 }), decode: (b) => inflateRawSync(b).toString() },
  {
    name: 'bytea, brotli quality 1, STORAGE EXTERNAL (the queue since migration 075, from 8 KB)',
    column: 'bytea',
    encode: (s) => brotliCompressSync(s, { params: { [constants.BROTLI_PARAM_QUALITY]: 1, [constants.BROTLI_PARAM_SIZE_HINT]: Buffer.byteLength(s) } }),
    decode: (b) => brotliDecompressSync(b).toString(),
  },
];

function cpuMs(f: () => void, n: number): number {
  const t = process.cpuUsage();
  for (let i = 0; i < n; i++) f();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000 / n;
}

async function measure(db: Db, codec: Codec, payloads: string[], table: string): Promise<string> {
  await db.query(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} (id bigint PRIMARY KEY, payload ${codec.column} NOT NULL)`);
  if (codec.column === 'bytea' || codec.external) await db.query(`ALTER TABLE ${table} ALTER COLUMN payload SET STORAGE EXTERNAL`);
  const encoded = payloads.map(codec.encode);
  const encodeMs = cpuMs(() => codec.encode(payloads[0]!), 200);
  const sample = codec.encode(payloads[0]!);
  const decodeMs = cpuMs(() => codec.decode(Buffer.isBuffer(sample) ? sample : Buffer.from(sample)), 200);
  await db.query('CHECKPOINT');
  const lsn0 = (await db.query<{ l: string }>('SELECT pg_current_wal_lsn() AS l')).rows[0]!.l;
  const t0 = performance.now();
  for (let i = 0; i < ROWS; i += 50) {
    const n = Math.min(50, ROWS - i);
    const values = Array.from({ length: n }, (_, k) => `($${2 * k + 1}, $${2 * k + 2})`).join(',');
    await db.query(`INSERT INTO ${table} (id, payload) VALUES ${values}`, Array.from({ length: n }, (_, k) => [i + k, encoded[(i + k) % encoded.length]]).flat());
  }
  const ms = performance.now() - t0;
  const wal = (await db.query<{ b: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS b', [lsn0])).rows[0]!.b;
  const size = (await db.query<{ b: string }>(`SELECT pg_total_relation_size('${table}') AS b`)).rows[0]!.b;
  const stored = Buffer.byteLength(typeof sample === 'string' ? sample : sample.toString('latin1'), typeof sample === 'string' ? 'utf8' : 'latin1');
  await db.query(`DROP TABLE ${table}`);
  return (
    `${codec.name}: ${fmt((ROWS * 1000) / ms)} rows/s (${fmt(ms / ROWS, 3)} ms a row wall) | WAL ${fmt(Number(wal) / ROWS)} B/row | table ${fmt(Number(size) / ROWS)} B/row | ` +
    `our encode ${fmt(encodeMs, 3)} ms, decode ${fmt(decodeMs, 3)} ms CPU per payload | payload ${fmt(Buffer.byteLength(payloads[0]!))} B → ${fmt(stored)} B sent`
  );
}

async function main(): Promise<void> {
  let url = process.env.DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  const tmp = mkdtempSync(join(tmpdir(), 'lm-bench-body-'));
  const db0: { db?: Db } = {};
  try {
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_body' });
      url = embedded.url;
    }
    const db = (db0.db = createPool(url, { max: 2, applicationName: 'lm-bench-body' }));
    const version = (await db.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version;
    console.log(`body path benchmark — ${new Date().toISOString()}, PostgreSQL ${version}, load ${loadavg().map((l) => l.toFixed(2)).join(', ')}`);
    const kinds: [string, (i: number) => string][] = [
      ['bench:mta\'s HTML (14 words repeated: compresses far better than mail does)', (i) => htmlBody(BYTES, i)],
      ['varied HTML (a 5,000-word vocabulary, a random 22-character token in every link)', (i) => variedHtml(BYTES, i)],
    ];
    for (const [kind, make] of kinds) {
      console.log(`body: ${kind}`);
      const bodies = Array.from({ length: 8 }, (_, i) => make(i));
      const payloads = Array.from({ length: 8 }, (_, i) => JSON.stringify({ ...benchJob(i, { tag: 'body', domains: 50, bodies }), recipient: `user${i}@d${i}.bench.test`, acceptedAt: Date.now() }));
      for (const codec of CODECS) {
        try {
          console.log(`  ${await measure(db, codec, payloads, 'lm_body_bench')}`);
        } catch (err) {
          console.log(`  ${codec.name}: not measured (${(err as Error).message})`);
        }
      }
    }
  } finally {
    await db0.db?.end().catch(() => {});
    await embedded?.stop().catch(() => {});
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
