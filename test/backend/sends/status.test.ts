/**
 * The sends' status module against real PostgreSQL: the CHECK constraint lists exactly
 * SEND_STATUSES (so the code's list and the database's cannot drift), an unknown status is
 * refused by the database, and insertSends writes every send born INITIAL_SEND_STATUS with
 * its two conflict rules.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INITIAL_SEND_STATUS, SEND_STATUSES, insertSends } from '../../../src/backend/sends/status.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';

const AT = Date.UTC(2026, 11, 8, 9, 0, 0);
const sends = (rows: Parameters<typeof insertSends>[1]['rows'], onConflict: 'id' | 'idempotency_key' = 'id') => ({
  type: 'transactional' as const,
  campaignId: null,
  fromEmail: 'receipts@acme.test',
  subject: 'Your receipt',
  provider: 'mta',
  rows,
  onConflict,
});

describe('email_sends status', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => db?.drop());

  it('the database constraint lists exactly SEND_STATUSES, and holds for every row', async () => {
    const r = await db.pool.query<{ def: string; validated: boolean }>(
      `SELECT pg_get_constraintdef(oid) AS def, convalidated AS validated FROM pg_constraint
        WHERE conrelid = 'email_sends'::regclass AND conname = 'email_sends_status_check'`,
    );
    expect(r.rows).toHaveLength(1);
    expect(r.rows[0]!.validated).toBe(true);
    // PostgreSQL prints `CHECK ((status = ANY (ARRAY['sending'::text, ...])))`.
    const listed = [...r.rows[0]!.def.matchAll(/'([^']+)'::text/g)].map((m) => m[1]);
    expect(r.rows[0]!.def).toMatch(/^CHECK \(\(status = ANY \(ARRAY\[/);
    expect([...listed].sort()).toEqual([...SEND_STATUSES].sort());
  });

  it('an UPDATE to a status outside the list is refused by PostgreSQL; every listed status is taken', async () => {
    await insertSends(db.pool, sends([{ id: 'es_check_1', contactId: null, toEmail: 'a@example.com' }]), AT);
    for (const status of SEND_STATUSES) {
      await db.pool.query(`UPDATE email_sends SET status = $2 WHERE id = $1`, ['es_check_1', status]);
    }
    await expect(db.pool.query(`UPDATE email_sends SET status = 'queued' WHERE id = $1`, ['es_check_1'])).rejects.toMatchObject({
      code: '23514',
      constraint: 'email_sends_status_check',
    });
    const row = await db.pool.query(`SELECT status FROM email_sends WHERE id = 'es_check_1'`);
    expect(row.rows[0].status).toBe(SEND_STATUSES[SEND_STATUSES.length - 1]);
  });

  it('insertSends writes a batch of sends, each born INITIAL_SEND_STATUS with its metadata; a repeated id or Idempotency-Key writes nothing', async () => {
    const many = Array.from({ length: 300 }, (_, i) => ({ id: `es_many_${String(i).padStart(3, '0')}`, contactId: null, toEmail: `r${i}@example.com`, metadata: { retryOf: `es_old_${i}` } }));
    const written = await insertSends(db.pool, sends(many), AT);
    expect(written).toHaveLength(300);
    expect(new Set(written.map((w) => w.status))).toEqual(new Set([INITIAL_SEND_STATUS]));
    const stored = await db.pool.query(`SELECT to_email, metadata, created_at, updated_at FROM email_sends WHERE id = 'es_many_007'`);
    expect(stored.rows[0]).toEqual({ to_email: 'r7@example.com', metadata: { retryOf: 'es_old_7' }, created_at: new Date(AT), updated_at: new Date(AT) });
    // A batch written again (a fan-out resumed after a crash): nothing new, nothing returned.
    expect(await insertSends(db.pool, sends(many.slice(0, 2)), AT + 1)).toEqual([]);

    const keyed = { id: 'es_key_1', contactId: null, toEmail: 'k@example.com', idempotencyKey: 'key-1', requestHash: 'h1' };
    expect(await insertSends(db.pool, sends([keyed], 'idempotency_key'), AT)).toEqual([
      { id: 'es_key_1', status: INITIAL_SEND_STATUS, request_hash: 'h1', updated_at: new Date(AT) },
    ]);
    expect(await insertSends(db.pool, sends([{ ...keyed, id: 'es_key_2' }], 'idempotency_key'), AT)).toEqual([]);
    const count = await db.pool.query(`SELECT count(*)::int AS n FROM email_sends WHERE idempotency_key = 'key-1'`);
    expect(count.rows[0].n).toBe(1);
  });
});
