import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/shared/db/migrate.js';
import { MIGRATIONS } from '../../src/shared/db/migrations/index.js';
import { createEmptyDatabase, type TestDatabase } from '../harness/db.js';

describe('migrations', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createEmptyDatabase();
  });
  afterAll(async () => db?.drop());

  it('several instances migrating at once apply each migration exactly once', async () => {
    const results = await Promise.all([migrate(db.pool), migrate(db.pool), migrate(db.pool), migrate(db.pool)]);
    const applied = results.flat();
    expect(applied.sort()).toEqual(MIGRATIONS.map((m) => m.id).sort());
    const rows = await db.pool.query('SELECT id FROM schema_migrations ORDER BY id');
    expect(rows.rows.map((r) => r.id)).toEqual(MIGRATIONS.map((m) => m.id));
    expect(await migrate(db.pool)).toEqual([]);
  });

  it('a failing migration rolls back and names itself', async () => {
    const bad = [...MIGRATIONS, { id: '999_bad', sql: 'CREATE TABLE lm_half (id int); SELECT * FROM no_such_table' }];
    await expect(migrate(db.pool, undefined, bad)).rejects.toThrow(/999_bad/);
    const half = await db.pool.query(`SELECT to_regclass('lm_half') AS t`);
    expect(half.rows[0].t).toBeNull();
  });
});
