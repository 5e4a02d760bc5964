/**
 * One PostgreSQL for the whole test run: the machine's server when LM_TEST_DATABASE_URL is
 * set (CI), otherwise an embedded server in a temporary directory. Migrations run once into
 * a template database; each test file clones it (see db.ts). Everything is dropped at the end.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedStore } from '../../src/runtime/embedded-postgres.js';
import { createPool, withDatabase } from '../../src/shared/db/pool.js';
import { migrate } from '../../src/shared/db/migrate.js';
import { silentLogger } from '../../src/shared/log.js';
import { randomString } from '../../src/shared/crypto.js';
import { reportingFailure } from './setup-failure.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
    runId: string;
    redisUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const teardown = await reportingFailure('global set-up', () => start(project));
  return () => reportingFailure('global teardown', teardown);
}

async function start(project: TestProject) {
  const runId = randomString(8, 'abcdefghijklmnopqrstuvwxyz0123456789');
  const template = `lm_tpl_${runId}`;
  let embedded: EmbeddedStore | undefined;
  let tmp: string | undefined;
  let admin: pg.Client | undefined;
  const release = async () => {
    await admin?.end();
    await embedded?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };

  let adminUrl = process.env.LM_TEST_DATABASE_URL;
  try {
    if (!adminUrl) {
      tmp = mkdtempSync(join(tmpdir(), 'lm-test-pg-'));
      embedded = await startEmbeddedPostgres({ dataDir: tmp, password: 'test', log: silentLogger });
      adminUrl = withDatabase(embedded.url, 'postgres');
    }
    const client = new pg.Client({ connectionString: adminUrl });
    // Held for the whole run: losing it (the server died) must say so, not end the run silently.
    client.on('error', (err) => process.stderr.write(`test PostgreSQL connection lost: ${inspect(err)}\n`));
    await client.connect();
    admin = client;
    await admin.query(`CREATE DATABASE ${template}`);
    const pool = createPool(withDatabase(adminUrl, template), { max: 2 });
    await migrate(pool).finally(() => pool.end());
  } catch (err) {
    await release().catch(() => {}); // leave no server or directory behind a failed set-up
    throw err;
  }

  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgTemplate', template);
  project.provide('runId', runId);
  project.provide('redisUrl', process.env.LM_TEST_REDIS_URL ?? '');

  return async () => {
    const left = await admin!.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname LIKE $1 OR datname = $2`,
      [`lm_t_${runId}_%`, template],
    );
    for (const { datname } of left.rows) {
      await admin!.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`).catch(() => {});
    }
    await release();
  };
}
