/** A fresh, migrated database per test file, cloned from the run's template. */
import pg from 'pg';
import { inject } from 'vitest';
import { createPool, withDatabase, type Db } from '../../src/shared/db/pool.js';
import { randomString } from '../../src/shared/crypto.js';

export interface TestDatabase {
  url: string;
  pool: Db;
  drop(): Promise<void>;
}

export async function createTestDatabase(opts: { max?: number } = {}): Promise<TestDatabase> {
  const adminUrl = inject('pgAdminUrl');
  const name = `lm_t_${inject('runId')}_${randomString(8, 'abcdefghijklmnopqrstuvwxyz0123456789')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${inject('pgTemplate')}`);
  } finally {
    await admin.end();
  }
  const url = withDatabase(adminUrl, name);
  const pool = createPool(url, { max: opts.max ?? 10 });
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await a.end();
    },
  };
}

/** An empty database (no migrations) for migration tests. */
export async function createEmptyDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('pgAdminUrl');
  const name = `lm_t_${inject('runId')}_${randomString(8, 'abcdefghijklmnopqrstuvwxyz0123456789')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = withDatabase(adminUrl, name);
  const pool = createPool(url, { max: 10 });
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await a.end();
    },
  };
}
