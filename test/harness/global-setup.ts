/**
 * One PostgreSQL for the whole test run: the machine's server when LM_TEST_DATABASE_URL is
 * set (CI), otherwise an embedded server in a temporary directory. Migrations run once into
 * a template database; each test file clones it (see db.ts). Everything is dropped at the end.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedStore } from '../../src/runtime/embedded-postgres.js';
import { createPool, withDatabase } from '../../src/shared/db/pool.js';
import { migrate } from '../../src/shared/db/migrate.js';
import { silentLogger } from '../../src/shared/log.js';
import { randomString } from '../../src/shared/crypto.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
    runId: string;
    redisUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const runId = randomString(8, 'abcdefghijklmnopqrstuvwxyz0123456789');
  let adminUrl = process.env.LM_TEST_DATABASE_URL;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  if (!adminUrl) {
    tmp = mkdtempSync(join(tmpdir(), 'lm-test-pg-'));
    embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'test', log: silentLogger });
    adminUrl = withDatabase(embedded.url, 'postgres');
  }
  const template = `lm_tpl_${runId}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${template}`);
  const pool = createPool(withDatabase(adminUrl, template), { max: 2 });
  await migrate(pool);
  await pool.end();

  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgTemplate', template);
  project.provide('runId', runId);
  project.provide('redisUrl', process.env.LM_TEST_REDIS_URL ?? '');

  return async () => {
    const left = await admin.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname LIKE $1 OR datname = $2`,
      [`lm_t_${runId}_%`, template],
    );
    for (const { datname } of left.rows) {
      await admin.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`).catch(() => {});
    }
    await admin.end();
    await embedded?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
}
