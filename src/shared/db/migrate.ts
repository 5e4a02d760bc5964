import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { sha256Hex } from '../crypto.js';
import type { Logger } from '../log.js';
import type { Db, DbClient } from './pool.js';
import { MIGRATIONS } from './migrations/index.js';

export interface Migration {
  /** Sortable, unique: `NNN_name`. */
  id: string;
  sql: string;
  /** Function files this migration calls (triggers, generated columns, backfills): applied, when new or changed, just before it. */
  functions?: string[];
}

/** A file of `functions/`: `CREATE OR REPLACE FUNCTION` statements, applied again whenever its text changes. */
export interface FunctionFile {
  /** The file name without `.sql`. */
  name: string;
  sql: string;
}

export interface MigrateResult {
  migrations: string[];
  /** Function files applied, in the order they ran. */
  functions: string[];
}

// Next to this module in src/ and in dist/ (the build copies them: tsc copies no .sql).
const FUNCTIONS_DIR = new URL('./functions/', import.meta.url);

export function loadFunctionFiles(dir: URL = FUNCTIONS_DIR): FunctionFile[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((f) => f.endsWith('.sql')).sort();
  } catch (err) {
    throw new Error(`function files not found in ${fileURLToPath(dir)} (npm run build copies them): ${(err as Error).message}`);
  }
  return names.map((f) => ({ name: f.slice(0, -'.sql'.length), sql: readFileSync(new URL(f, dir), 'utf8') }));
}

// Any constant works; it only has to be the same for every instance of the fleet.
const MIGRATION_LOCK = 0x1e77e3;

/**
 * Applies pending migrations in order, then the function files whose text changed since they
 * were last applied (by name; a migration's own `functions` go just before it). A
 * session-level advisory lock serializes instances starting at once; each migration runs in
 * its own transaction with its bookkeeping row, the remaining function files in one.
 */
export async function migrate(
  db: Db,
  log?: Logger,
  migrations: Migration[] = MIGRATIONS,
  functions: FunctionFile[] = loadFunctionFiles(),
): Promise<MigrateResult> {
  const ids = migrations.map((m) => m.id);
  if (new Set(ids).size !== ids.length || [...ids].sort().join() !== ids.join()) {
    throw new Error('migrations must have unique ids in ascending order');
  }
  const files = new Map(functions.map((f) => [f.name, { ...f, hash: sha256Hex(f.sql) }]));
  for (const m of migrations) {
    for (const name of m.functions ?? []) if (!files.has(name)) throw new Error(`migration ${m.id} names a missing function file: ${name}`);
  }
  const client = await db.connect();
  const result: MigrateResult = { migrations: [], functions: [] };
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query(
      `CREATE TABLE IF NOT EXISTS schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
       CREATE TABLE IF NOT EXISTS schema_functions (name text PRIMARY KEY, hash text NOT NULL, applied_at timestamptz NOT NULL);`,
    );
    const done = new Set((await client.query<{ id: string }>('SELECT id FROM schema_migrations')).rows.map((r) => r.id));
    const hashes = new Map(
      (await client.query<{ name: string; hash: string }>('SELECT name, hash FROM schema_functions')).rows.map((r) => [r.name, r.hash]),
    );
    const pending = (name: string) => hashes.get(name) !== files.get(name)!.hash;
    const apply = async (name: string) => {
      const f = files.get(name)!;
      try {
        await client.query(f.sql);
      } catch (err) {
        throw new Error(`function file ${name}.sql failed: ${(err as Error).message}`);
      }
      await client.query(
        `INSERT INTO schema_functions (name, hash, applied_at) VALUES ($1, $2, now())
         ON CONFLICT (name) DO UPDATE SET hash = EXCLUDED.hash, applied_at = EXCLUDED.applied_at`,
        [name, f.hash],
      );
      hashes.set(name, f.hash);
      result.functions.push(name);
      log?.info({ functionFile: name }, 'function file applied');
    };

    for (const m of migrations) {
      if (done.has(m.id)) continue;
      try {
        await client.query('BEGIN');
        for (const name of m.functions ?? []) if (pending(name)) await apply(name);
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (id) VALUES ($1)', [m.id]);
        await client.query('COMMIT');
      } catch (err) {
        await rollback(client);
        throw new Error(`migration ${m.id} failed: ${(err as Error).message}`);
      }
      result.migrations.push(m.id);
      log?.info({ migration: m.id }, 'migration applied');
    }

    // Code older than the database (restarted during a rolling upgrade) must not put its
    // functions back over the newer ones.
    const newer = [...done].filter((id) => !ids.includes(id));
    if (newer.length) {
      log?.warn({ migrations: newer }, 'the database is newer than this code: function files not applied');
    } else {
      try {
        await client.query('BEGIN');
        for (const name of files.keys()) if (pending(name)) await apply(name);
        // A file deleted and later restored must be applied again.
        await client.query('DELETE FROM schema_functions WHERE name <> ALL ($1::text[])', [[...files.keys()]]);
        await client.query('COMMIT');
      } catch (err) {
        await rollback(client);
        throw err;
      }
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    client.release();
  }
  return result;
}

async function rollback(client: DbClient): Promise<void> {
  await client.query('ROLLBACK').catch(() => {});
}
