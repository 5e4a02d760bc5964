/** src/shared/signing.ts: one instance key in lm_meta that a fleet agrees on; compact, purpose-bound, expiring tokens. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { createPool } from '../../../src/shared/db/pool.js';
import { loadSigner, Signer } from '../../../src/shared/signing.js';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';

describe('signing', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => db?.drop());

  it('instances starting together create one key and all use it', async () => {
    const pools = Array.from({ length: 4 }, () => createPool(db.url, { max: 2 }));
    try {
      const signers = await Promise.all(pools.map((p) => loadSigner(p)));
      const token = signers[0].sign('test', { a: 1 });
      for (const s of signers) expect(s.verify('test', token, 0)).toEqual({ ok: true, data: { a: 1 }, expiresAt: null });
      const rows = (await db.pool.query(`SELECT value FROM lm_meta WHERE key = 'signing_key'`)).rows;
      expect(rows.length).toBe(1);
      expect(Buffer.from(rows[0].value, 'base64url').length).toBe(32);
      expect(await loadSigner(pools[0])).toBe(signers[0]); // loaded once per pool
    } finally {
      for (const p of pools) await p.end();
    }
  });

  it('binds a token to its purpose, detects any change, and expires on the given clock', () => {
    const clock = new ManualClock();
    const s = new Signer(Buffer.alloc(32, 7));
    const t = s.sign('doi', { c: 'ct_1', t: 'tp_1' }, { expiresAt: clock.now() + 60_000 });
    expect(t).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/);
    expect(s.verify('doi', t, clock.now())).toEqual({ ok: true, data: { c: 'ct_1', t: 'tp_1' }, expiresAt: clock.now() + 60_000 });
    expect(s.verify('unsubscribe', t, clock.now())).toEqual({ ok: false, reason: 'bad_signature' });
    expect(new Signer(Buffer.alloc(32, 8)).verify('doi', t, clock.now())).toEqual({ ok: false, reason: 'bad_signature' });
    const [body, mac] = t.split('.');
    const other = Buffer.from(JSON.stringify({ d: { c: 'ct_2', t: 'tp_1' }, e: 9e9 })).toString('base64url');
    expect(s.verify('doi', `${other}.${mac}`, clock.now())).toEqual({ ok: false, reason: 'bad_signature' });
    for (const bad of ['', 'x', `${body}`, `${body}.`, `${body}.${mac}.`, `${body}.${mac.slice(1)}`, `${'a'.repeat(5000)}.${mac}`]) {
      expect(s.verify('doi', bad, clock.now()).ok).toBe(false);
    }
    clock.advance(59_000);
    expect(s.verify('doi', t, clock.now()).ok).toBe(true);
    clock.advance(1_000);
    expect(s.verify('doi', t, clock.now())).toEqual({ ok: false, reason: 'expired' });
    expect(() => new Signer(Buffer.alloc(16))).toThrow(/32 bytes/);
  });
});
