import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/shared/crypto.js';
import { loadFunctionFiles, migrate, type FunctionFile } from '../../src/shared/db/migrate.js';
import { MIGRATIONS } from '../../src/shared/db/migrations/index.js';
import type { Db, DbClient } from '../../src/shared/db/pool.js';
import { ProvenanceStore } from '../../src/mta/delivery/provenance.js';
import { ManualClock } from '../../src/shared/clock.js';
import { createEmptyDatabase, createTestDatabase, type TestDatabase } from '../harness/db.js';

const FILES = loadFunctionFiles();

describe('migrations', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createEmptyDatabase();
  });
  afterAll(async () => db?.drop());

  it('several instances migrating at once apply each migration and each function file exactly once', async () => {
    const results = await Promise.all([migrate(db.pool), migrate(db.pool), migrate(db.pool), migrate(db.pool)]);
    expect(results.flatMap((r) => r.migrations).sort()).toEqual(MIGRATIONS.map((m) => m.id).sort());
    expect(results.flatMap((r) => r.functions).sort()).toEqual(FILES.map((f) => f.name).sort());
    const rows = await db.pool.query('SELECT id FROM schema_migrations ORDER BY id');
    expect(rows.rows.map((r) => r.id)).toEqual(MIGRATIONS.map((m) => m.id));
    const fns = await db.pool.query('SELECT name, hash FROM schema_functions ORDER BY name');
    expect(fns.rows).toEqual(FILES.map((f) => ({ name: f.name, hash: sha256Hex(f.sql) })));
    expect(await migrate(db.pool)).toEqual({ migrations: [], functions: [] });
  });

  it('a failing migration rolls back and names itself', async () => {
    const bad = [...MIGRATIONS, { id: '999_bad', sql: 'CREATE TABLE lm_half (id int); SELECT * FROM no_such_table' }];
    await expect(migrate(db.pool, undefined, bad)).rejects.toThrow(/999_bad/);
    const half = await db.pool.query(`SELECT to_regclass('lm_half') AS t`);
    expect(half.rows[0].t).toBeNull();
  });
});

/** Every function of ours (not pg_trgm's), by signature, as PostgreSQL prints it. */
async function functionDefs(db: Db | DbClient): Promise<Map<string, string>> {
  const { rows } = await db.query<{ sig: string; def: string }>(
    `SELECT p.oid::regprocedure::text AS sig, pg_get_functiondef(p.oid) AS def FROM pg_proc p
      WHERE p.pronamespace = 'public'::regnamespace
        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')`,
  );
  return new Map(rows.map((r) => [r.sig, r.def]));
}

const fn = (name: string, sql: string): FunctionFile => ({ name, sql });
/** The first column of the first row of `SELECT <what>`. */
const value = async (db: Db, what: string) => Object.values((await db.query(`SELECT ${what}`)).rows[0])[0];

describe('function files', () => {
  const dbs: TestDatabase[] = [];
  const fresh = async () => {
    const db = await createTestDatabase();
    dbs.push(db);
    return db.pool;
  };
  afterAll(async () => {
    for (const db of dbs) await db.drop();
  });

  it('a migrated database holds exactly the functions the files define', async () => {
    const pool = await fresh();
    const defs = await functionDefs(pool);
    const names = new Set([...defs.keys()].map((sig) => sig.slice(0, sig.indexOf('('))));
    const defined = new Set(FILES.flatMap((f) => [...f.sql.matchAll(/CREATE OR REPLACE FUNCTION (\w+)/g)].map((m) => m[1])));
    expect([...names].sort()).toEqual([...defined].sort());
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      for (const f of FILES) await client.query(f.sql);
      // Applying the files again changes nothing: no migration left its own version behind.
      expect(await functionDefs(client)).toEqual(defs);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('a database migrated before function files existed ends with the functions of a fresh one', async () => {
    const pool = await fresh();
    const want = await functionDefs(pool);
    // As then: no bookkeeping table, and each body as its migration wrote it (other text).
    await pool.query('DROP TABLE schema_functions');
    for (const def of want.values()) {
      if (!def.includes('AS $function$')) continue; // a RETURN body keeps no text to differ in
      await pool.query(def.replace('AS $function$', 'AS $function$\n-- as a migration wrote it\n'));
    }
    expect(await functionDefs(pool)).not.toEqual(want);
    const { functions } = await migrate(pool);
    expect(functions.sort()).toEqual(FILES.map((f) => f.name).sort());
    expect(await functionDefs(pool)).toEqual(want);
  });

  it('drops the signatures queue_claim, queue_cycle and queue_settle_groups had before migrations 004 and 007', async () => {
    const db = await createEmptyDatabase();
    dbs.push(db);
    await migrate(db.pool, undefined, MIGRATIONS.filter((m) => m.id < '004'), []);
    // Stand-ins with the old signatures (their bodies do not matter).
    await db.pool.query(`
      CREATE FUNCTION queue_claim(text, text, integer, timestamptz, bigint) RETURNS SETOF queue_jobs
        LANGUAGE sql AS 'SELECT * FROM queue_jobs WHERE false';
      CREATE FUNCTION queue_cycle(text, timestamptz, bigint[], bigint[], integer[], text[], bigint[], text[], text, integer, bigint)
        RETURNS SETOF queue_jobs LANGUAGE sql AS 'SELECT * FROM queue_jobs WHERE false';
      CREATE FUNCTION queue_settle_groups(text, text[], integer[], timestamptz[], bigint[]) RETURNS void
        LANGUAGE sql AS 'SELECT'`);
    await migrate(db.pool);
    const names = [...(await functionDefs(db.pool)).keys()].map((sig) => sig.slice(0, sig.indexOf('(')));
    expect(names.filter((n) => /^queue_(claim|cycle|settle_groups)$/.test(n)).sort()).toEqual(['queue_claim', 'queue_cycle', 'queue_settle_groups']);
    // A call with the old number of arguments finds one function, not two.
    await expect(value(db.pool, `count(*) FROM queue_claim('q', 'w', 1, now(), 1000)`)).resolves.toBe(0);
  });

  it('applies a function file again when its text changes, and only then', async () => {
    const pool = await fresh();
    const v = (n: number) => fn('zz_test', `CREATE OR REPLACE FUNCTION lm_test_fn() RETURNS integer LANGUAGE sql AS $$ SELECT ${n} $$`);
    expect(await migrate(pool, undefined, MIGRATIONS, [...FILES, v(1)])).toEqual({ migrations: [], functions: ['zz_test'] });
    expect(await migrate(pool, undefined, MIGRATIONS, [...FILES, v(1)])).toEqual({ migrations: [], functions: [] });
    expect(await migrate(pool, undefined, MIGRATIONS, [...FILES, v(2)])).toEqual({ migrations: [], functions: ['zz_test'] });
    expect(await value(pool, 'lm_test_fn()')).toBe(2);

    // Deleted (and its function dropped, as a migration would), then restored: applied again.
    expect((await migrate(pool)).functions).toEqual([]);
    await pool.query('DROP FUNCTION lm_test_fn()');
    expect(await migrate(pool, undefined, MIGRATIONS, [...FILES, v(2)])).toEqual({ migrations: [], functions: ['zz_test'] });
    expect(await value(pool, 'lm_test_fn()')).toBe(2);
  });

  it("applies a migration's function files just before it and the others after the last migration", async () => {
    const pool = await fresh();
    const double = fn('zz_double', 'CREATE OR REPLACE FUNCTION lm_test_double(a integer) RETURNS integer LANGUAGE sql IMMUTABLE RETURN a * 2');
    // A SQL body is checked at creation: this one needs 999's table.
    const count = fn('zz_count', 'CREATE OR REPLACE FUNCTION lm_test_count() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM lm_test_b $$');
    const uses = { id: '998_uses', sql: 'CREATE TABLE lm_test_a (a integer, b integer GENERATED ALWAYS AS (lm_test_double(a)) STORED)' };
    const table = { id: '999_table', sql: 'CREATE TABLE lm_test_b (a integer)' };
    const files = [...FILES, count, double];

    await expect(migrate(pool, undefined, [...MIGRATIONS, uses, table], files)).rejects.toThrow(/998_uses.*lm_test_double/);
    const result = await migrate(pool, undefined, [...MIGRATIONS, { ...uses, functions: ['zz_double'] }, table], files);
    expect(result).toEqual({ migrations: ['998_uses', '999_table'], functions: ['zz_double', 'zz_count'] });
    await pool.query('INSERT INTO lm_test_a (a) VALUES (21)');
    expect(await value(pool, 'b FROM lm_test_a')).toBe(42);
    expect(await value(pool, 'lm_test_count()')).toBe(0);
  });

  it('a failing function file rolls back the others applied with it and names itself', async () => {
    const pool = await fresh();
    const good = fn('zz_a', 'CREATE OR REPLACE FUNCTION lm_test_a() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$');
    const bad = fn('zz_b', 'CREATE OR REPLACE FUNCTION lm_test_b() RETURNS integer LANGUAGE sql AS $$ SELECT * FROM no_such_table $$');
    await expect(migrate(pool, undefined, MIGRATIONS, [...FILES, good, bad])).rejects.toThrow(/zz_b\.sql/);
    expect(await value(pool, `to_regprocedure('lm_test_a()')`)).toBeNull();
    expect(await value(pool, `count(*) FROM schema_functions WHERE name LIKE 'zz%'`)).toBe(0);
  });

  it('code older than the database leaves the function files alone', async () => {
    const pool = await fresh();
    const v = (n: number) => fn('zz_test', `CREATE OR REPLACE FUNCTION lm_test_fn() RETURNS integer LANGUAGE sql AS $$ SELECT ${n} $$`);
    await migrate(pool, undefined, [...MIGRATIONS, { id: '999_newer', sql: '' }], [...FILES, v(2)]);
    // The previous release restarting during a rolling upgrade: it lacks 999 and has v(1).
    expect(await migrate(pool, undefined, MIGRATIONS, [...FILES, v(1)])).toEqual({ migrations: [], functions: [] });
    expect(await value(pool, 'lm_test_fn()')).toBe(2);
  });

  it('a migration naming a function file that does not exist is refused before anything runs', async () => {
    const pool = await fresh();
    const bad = [...MIGRATIONS, { id: '999_x', sql: 'CREATE TABLE lm_test_x ()', functions: ['no_such_file'] }];
    await expect(migrate(pool, undefined, bad)).rejects.toThrow(/999_x.*no_such_file/);
    expect(await value(pool, `to_regclass('lm_test_x')`)).toBeNull();
  });
});

describe('migration 076 (send provenance keyed by send id)', () => {
  let db: TestDatabase;
  afterAll(async () => db?.drop());

  it('keeps the rows written before as the legacy table, read by message id for old tokens; new rows are keyed by send id', async () => {
    db = await createEmptyDatabase();
    await migrate(db.pool, undefined, MIGRATIONS.filter((m) => m.id < '076'));
    const at = new Date(Date.UTC(2026, 0, 5));
    await db.pool.query(
      `INSERT INTO mta_send_provenance (message_id, organization_id, campaign_id, recipient, domain, sent_at, ip) VALUES ('m-1', 'org-old', NULL, 'old@dest.test', 'dest.test', $1, '127.0.0.2')`,
      [at],
    );
    await migrate(db.pool);
    const clock = new ManualClock(at.getTime() + 60_000);
    const store = new ProvenanceStore(db.pool, clock);
    await store.record({ sendId: '7', messageId: 'm-1', organizationId: 'org-new', campaignId: null, recipient: 'new@dest.test', domain: 'dest.test', ip: null, sentAt: clock.now() });
    expect(await store.lookup({ id: 'm-1', legacy: true })).toMatchObject({ sendId: null, organizationId: 'org-old', recipient: 'old@dest.test', ip: '127.0.0.2' });
    expect(await store.lookup({ id: '7', legacy: false })).toMatchObject({ sendId: '7', messageId: 'm-1', organizationId: 'org-new', recipient: 'new@dest.test' });
    // Both tables age out alike.
    clock.advance(17 * 86_400_000);
    expect(await store.prune()).toBe(2);
    expect(await store.lookup({ id: 'm-1', legacy: true })).toBeNull();
  });
});

describe('migrations 078 and 079 (email_sends.status CHECK)', () => {
  const dbs: TestDatabase[] = [];
  afterAll(async () => {
    for (const d of dbs) await d.drop();
  });
  const before078 = async (statuses: string[]) => {
    const d = await createEmptyDatabase();
    dbs.push(d);
    await migrate(d.pool, undefined, MIGRATIONS.filter((m) => m.id < '078'));
    const at = new Date(Date.UTC(2026, 0, 5));
    for (const [i, status] of statuses.entries()) {
      await d.pool.query(
        `INSERT INTO email_sends (id, type, to_email, from_email, subject, provider, status, created_at, updated_at)
         VALUES ($1, 'transactional', 'r@example.com', 'f@acme.test', 's', 'mta', $2, $3, $3)`,
        [`es_old_${i}`, status, at],
      );
    }
    return d.pool;
  };

  it('an upgraded database keeps its sends and ends with the constraint validated', async () => {
    const pool = await before078(['sending', 'accepted', 'delivered', 'bounced', 'complained', 'failed']);
    expect((await migrate(pool)).migrations).toEqual(['078_send_status_check', '079_send_status_validate']);
    const rows = await pool.query(`SELECT id, status FROM email_sends ORDER BY id`);
    expect(rows.rows.map((r) => r.status)).toEqual(['sending', 'accepted', 'delivered', 'bounced', 'complained', 'failed']);
    const c = await pool.query(`SELECT convalidated FROM pg_constraint WHERE conrelid = 'email_sends'::regclass AND conname = 'email_sends_status_check'`);
    expect(c.rows).toEqual([{ convalidated: true }]);
    await expect(pool.query(`UPDATE email_sends SET status = 'queued' WHERE id = 'es_old_0'`)).rejects.toMatchObject({ code: '23514' });
  });

  it('a row with a status outside the list stops the upgrade at 079, named, with 078 in place and the row untouched', async () => {
    const pool = await before078(['sent', 'queued']);
    await expect(migrate(pool)).rejects.toThrow(/079_send_status_validate.*email_sends_status_check/);
    const applied = await pool.query(`SELECT id FROM schema_migrations WHERE id >= '078' ORDER BY id`);
    expect(applied.rows.map((r) => r.id)).toEqual(['078_send_status_check']);
    // New writes are checked already (the constraint exists, not yet validated).
    await expect(pool.query(`UPDATE email_sends SET status = 'queued' WHERE id = 'es_old_0'`)).rejects.toMatchObject({ code: '23514' });
    const bad = await pool.query(`SELECT status FROM email_sends WHERE id = 'es_old_1'`);
    expect(bad.rows).toEqual([{ status: 'queued' }]);
    // Once the row is fixed, the upgrade finishes.
    await pool.query(`UPDATE email_sends SET status = 'failed' WHERE id = 'es_old_1'`);
    expect((await migrate(pool)).migrations).toEqual(['079_send_status_validate']);
  });
});
