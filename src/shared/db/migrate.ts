import type { Logger } from '../log.js';
import type { Db } from './pool.js';
import { MIGRATIONS } from './migrations/index.js';

export interface Migration {
  /** Sortable, unique: `NNN_name`. */
  id: string;
  sql: string;
}

// Any constant works; it only has to be the same for every instance of the fleet.
const MIGRATION_LOCK = 0x1e77e3;

/**
 * Applies pending migrations in order. A session-level advisory lock serializes instances
 * starting at once; each migration runs in its own transaction with its bookkeeping row.
 */
export async function migrate(db: Db, log?: Logger, migrations: Migration[] = MIGRATIONS): Promise<string[]> {
  const ids = migrations.map((m) => m.id);
  if (new Set(ids).size !== ids.length || [...ids].sort().join() !== ids.join()) {
    throw new Error('migrations must have unique ids in ascending order');
  }
  const client = await db.connect();
  const applied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query(
      `CREATE TABLE IF NOT EXISTS schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const done = new Set((await client.query<{ id: string }>('SELECT id FROM schema_migrations')).rows.map((r) => r.id));
    for (const m of migrations) {
      if (done.has(m.id)) continue;
      try {
        await client.query('BEGIN');
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (id) VALUES ($1)', [m.id]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw new Error(`migration ${m.id} failed: ${(err as Error).message}`);
      }
      applied.push(m.id);
      log?.info({ migration: m.id }, 'migration applied');
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    client.release();
  }
  return applied;
}
