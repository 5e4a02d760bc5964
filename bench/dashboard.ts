/**
 * Dashboard benchmark (`npm run bench:dashboard`). One exported function per measurement, so
 * measurements can be added side by side (the dashboard UI adds its first render here); the
 * main block runs them all on one embedded PostgreSQL (or DATABASE_URL) and prints absolute
 * numbers and ratios to a baseline measured in the same run.
 *
 * measureCsvImport: the admin CSV import (ContactImporter: spool, stream-parse, validate with
 * the address grammar, batched INSERT … ON CONFLICT) of BENCH_IMPORT_ROWS rows (100,000) into
 * the contacts table with all its indexes, against a raw server-side `COPY contacts FROM` of
 * the same rows (pre-validated, ids given) into the same table: the database's own floor.
 * Each is run BENCH_ROUNDS times (2) alternately on an emptied table; the best of each counts.
 */
import { writeFileSync, mkdtempSync, rmSync, chmodSync, createReadStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContactImporter } from '../src/backend/api/contact-import.js';
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

async function main(): Promise<void> {
  const pgDir = mkdtempSync(join(tmpdir(), 'lm-bench-dashboard-pg-'));
  let embedded: EmbeddedStore | undefined;
  try {
    let url = process.env.DATABASE_URL;
    if (!url) {
      embedded = await startEmbeddedPostgres({ dataDir: pgDir, password: 'bench', log: silentLogger, database: 'lm_bench' });
      url = embedded.url;
    }
    const db = createPool(url, { max: 4 });
    await migrate(db);
    try {
      const r = await measureCsvImport(db, { rows: Number(process.env.BENCH_IMPORT_ROWS ?? 100_000), rounds: Number(process.env.BENCH_ROUNDS ?? 2) });
      console.log(`CSV import, ${fmt(r.rows)} rows (best of rounds):`);
      console.log(`  import (spool + parse + validate + batched INSERT … ON CONFLICT): ${fmt(r.importRowsPerSec)} rows/s`);
      console.log(`  raw COPY of the same rows into the same table:                  ${fmt(r.copyRowsPerSec)} rows/s`);
      console.log(`  ratio import / COPY: ${fmt(r.ratio, 2)}  (goal: ≥ 10,000 rows/s absolute)`);
    } finally {
      await db.end();
    }
  } finally {
    await embedded?.stop();
    rmSync(pgDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
