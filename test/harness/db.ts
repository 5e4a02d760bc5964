/** A fresh database per test file: cloned from the run's migrated template, or empty. */
import pg from 'pg';
import { inject } from 'vitest';
import { createPool, withDatabase, type Db } from '../../src/shared/db/pool.js';
import { randomString } from '../../src/shared/crypto.js';

export interface TestDatabase {
  url: string;
  pool: Db;
  drop(): Promise<void>;
}

async function adminQuery(sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

async function newDatabase(template: string | null, max: number): Promise<TestDatabase> {
  // Named after the run, so the global teardown drops anything a crashed file left behind.
  const name = `lm_t_${inject('runId')}_${randomString(8, 'abcdefghijklmnopqrstuvwxyz0123456789')}`;
  await adminQuery(template ? `CREATE DATABASE ${name} TEMPLATE ${template}` : `CREATE DATABASE ${name}`);
  const url = withDatabase(inject('pgAdminUrl'), name);
  const pool = createPool(url, { max });
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    },
  };
}

/** A migrated database (a copy of the template the global setup migrated once). */
export function createTestDatabase(opts: { max?: number } = {}): Promise<TestDatabase> {
  return newDatabase(inject('pgTemplate'), opts.max ?? 10);
}

/** An empty database (no migrations), for migration tests. */
export function createEmptyDatabase(): Promise<TestDatabase> {
  return newDatabase(null, 10);
}
