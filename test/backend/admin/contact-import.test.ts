/**
 * CSV import of 100,000 contacts through the admin API against real PostgreSQL: streamed
 * upload, progress, rejected rows reported with their row numbers, names updated on existing
 * contacts; then the streamed export returns every contact. Roles: an editor imports, a
 * viewer may not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CsvReader } from '../../../src/shared/csv.js';
import { ADMIN_TOKEN, call, eventually, startBackend, type Backend } from '../public/helpers.js';
import { login } from './helpers.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { ContactImporter } from '../../../src/backend/api/contact-import.js';
import { CONTACT_IMPORT } from '../../../src/backend/api/policy.js';

const N = 100_000;
const PW = 'correct horse battery';

/** Row i (1-based): every 997th has an invalid address, every 1999th none; row 5 has quoted commas and a line break in a name. */
function bigCsv(): { text: string; bad: Map<number, string> } {
  const bad = new Map<number, string>();
  const lines = ['Email,First Name,last_name,ignored'];
  for (let i = 1; i <= N; i++) {
    if (i % 997 === 0) {
      lines.push(`broken${i}@@example.com,Bad,Row,x`);
      bad.set(i, 'invalid email address');
    } else if (i % 1999 === 0) {
      lines.push(`,No,Email,x`);
      bad.set(i, 'email is missing');
    } else if (i === 5) {
      lines.push(`u5@import.example,"Smith, ""Jr""\nSecond line",Five,x`);
    } else if (i === 7) {
      lines.push(`Existing@Import.example,Seven,Updated,x`);
    } else {
      lines.push(`u${i}@import.example,First${i},Last${i},x`);
    }
  }
  return { text: `${lines.join('\r\n')}\r\n`, bad };
}

describe('CSV contact import and export', () => {
  let b: Backend;
  beforeAll(async () => {
    b = await startBackend();
    await call(b.url, 'POST', '/admin/setup', { json: { adminToken: ADMIN_TOKEN, email: 'root@acme.example', password: PW } });
    await call(b.url, 'POST', '/admin/users', { admin: true, json: { email: 'ed@acme.example', password: PW, role: 'editor' } });
    await call(b.url, 'POST', '/admin/users', { admin: true, json: { email: 'view@acme.example', password: PW, role: 'viewer' } });
    await b.app.db.pool.query(`INSERT INTO contacts (id, email, first_name, source, created_at, updated_at) VALUES ('ct_existing', 'existing@import.example', 'Old', 'api', now(), now())`);
  }, 60_000);
  afterAll(async () => {
    await b?.close();
  });

  it('imports 100,000 rows as an editor, reports rejected rows, updates existing contacts', async () => {
    const editor = await login(b.url, 'ed@acme.example', PW);
    const { text, bad } = bigCsv();
    const started = Date.now();
    const up = await editor.call('POST', '/admin/contacts/imports', { body: text, headers: { 'content-type': 'text/csv' } });
    expect(up.status).toBe(202);
    const id = up.body.data.id as string;
    expect(id).toMatch(/^imp_/);

    const seen: number[] = [];
    const done = await eventually(async () => {
      const r = await editor.call('GET', `/admin/contacts/imports/${id}`);
      expect(r.status).toBe(200);
      seen.push(r.body.data.processed);
      return r.body.data.state !== 'running' && r.body.data;
    }, 120_000);
    const secs = (Date.now() - started) / 1000;
    expect(done).toMatchObject({ id, state: 'done', total: N, processed: N, rejected: bad.size, imported: N - bad.size });
    expect(seen.every((v, i) => i === 0 || v >= seen[i - 1]!)).toBe(true); // progress only moves forward
    expect(done.errors).toHaveLength(bad.size);
    for (const e of done.errors as { row: number; message: string }[]) expect(e.message).toContain(bad.get(e.row)!);
    expect(done.errors.map((e: { row: number }) => e.row)).toEqual([...bad.keys()]);
    console.log(`import of ${N} rows: ${secs.toFixed(1)} s end to end (${Math.round(N / secs)} rows/s)`);

    const count = (await b.app.db.pool.query(`SELECT count(*)::int AS n FROM contacts WHERE source = 'import'`)).rows[0].n;
    expect(count).toBe(N - bad.size - 1); // the existing contact was matched, not created
    const five = (await b.app.db.pool.query(`SELECT first_name, last_name FROM contacts WHERE email = 'u5@import.example'`)).rows[0];
    expect(five).toEqual({ first_name: 'Smith, "Jr"\nSecond line', last_name: 'Five' });
    const existing = (await b.app.db.pool.query(`SELECT id, first_name, last_name, source FROM contacts WHERE lower(email) = 'existing@import.example'`)).rows;
    expect(existing).toEqual([{ id: 'ct_existing', first_name: 'Seven', last_name: 'Updated', source: 'api' }]);
    // The trigger-maintained count (the REST API's O(1) total) saw every batch.
    const shards = (await b.app.db.pool.query(`SELECT sum(n)::int AS n FROM contact_count_shards`)).rows[0].n;
    expect(shards).toBe(count + 1);
  }, 180_000);

  it('exports every contact as CSV, streamed, that reads back to the same rows', async () => {
    const r = await fetch(`${b.url}/admin/contacts/export.csv`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/csv/);
    expect(r.headers.get('content-length')).toBeNull(); // streamed (chunked), not built whole
    const reader = new CsvReader();
    const recs = [...reader.push(await r.text()), ...reader.end()];
    expect(recs[0]).toEqual(['id', 'email', 'first_name', 'last_name', 'source', 'created_at', 'updated_at']);
    const total = (await b.app.db.pool.query(`SELECT count(*)::int AS n FROM contacts`)).rows[0].n;
    expect(recs).toHaveLength(total + 1);
    const ids = recs.slice(1).map((x) => x[0]!);
    expect([...ids].sort()).toEqual(ids); // id order, no repeats
    expect(new Set(ids).size).toBe(total);
    expect(recs.find((x) => x[1] === 'u5@import.example')!.slice(2, 5)).toEqual(['Smith, "Jr"\nSecond line', 'Five', 'import']);
  });

  it('refuses a viewer, a file without an email column, an empty file and other content types', async () => {
    const viewer = await login(b.url, 'view@acme.example', PW);
    const v = await viewer.call('POST', '/admin/contacts/imports', { body: 'email\na@b.example\n', headers: { 'content-type': 'text/csv' } });
    expect(v.status).toBe(403);
    expect((await viewer.call('GET', '/admin/contacts/export.csv')).status).toBe(200);

    const empty = await call(b.url, 'POST', '/admin/contacts/imports', { admin: true, body: 'email\n', headers: { 'content-type': 'text/csv' } });
    expect(empty.status).toBe(400);
    expect(empty.body.error.data.reason).toBe('empty_import');
    const json = await call(b.url, 'POST', '/admin/contacts/imports', { admin: true, json: { email: 'a@b.example' } });
    expect(json.status).toBe(400);
    expect(json.body.error.data.reason).toBe('unsupported_media_type');

    const noEmail = await call(b.url, 'POST', '/admin/contacts/imports', { admin: true, body: 'name,phone\nA,1\n', headers: { 'content-type': 'text/csv' } });
    expect(noEmail.status).toBe(202);
    const failed = await eventually(async () => {
      const r = await call(b.url, 'GET', `/admin/contacts/imports/${noEmail.body.data.id}`, { admin: true });
      return r.body.data.state !== 'running' && r.body.data;
    });
    expect(failed).toMatchObject({ state: 'failed', imported: 0 });
    expect(failed.error).toContain('email');
    expect((await call(b.url, 'GET', '/admin/contacts/imports/imp_nope', { admin: true })).status).toBe(404);
  });
});

describe('imports whose process is gone', () => {
  it('are marked failed once their progress is stale; another instance’s import in progress goes on', async () => {
    const clock = new ManualClock(Date.parse('2026-11-26T08:00:00Z'));
    const b = await startBackend({ clock });
    try {
      const at = (ms: number) => new Date(clock.now() - ms).toISOString();
      await b.app.db.pool.query(
        `INSERT INTO contact_imports (id, state, total, created_at, updated_at) VALUES
           ('imp_gone', 'running', 10, $1, $1), ('imp_busy', 'running', 10, $2, $2), ('imp_done', 'done', 10, $1, $1)`,
        [at(CONTACT_IMPORT.staleAfterMs + 1_000), at(1_000)],
      );
      const importer = new ContactImporter({ db: b.app.services.db, clock, log: b.app.services.log });
      expect(await importer.failStale()).toEqual(['imp_gone']);
      const state = async () => Object.fromEntries((await b.app.db.pool.query(`SELECT id, state FROM contact_imports WHERE id LIKE 'imp_%' ORDER BY id`)).rows.map((r) => [r.id, r.state]));
      expect(await state()).toMatchObject({ imp_gone: 'failed', imp_busy: 'running', imp_done: 'done' });
      // The busy one stops moving (its process died): later it is stale too.
      clock.advance(CONTACT_IMPORT.staleAfterMs);
      expect(await importer.failStale()).toEqual(['imp_busy']);
      expect(await state()).toMatchObject({ imp_gone: 'failed', imp_busy: 'failed', imp_done: 'done' });
      await importer.stop();
    } finally {
      await b.close();
    }
  }, 60_000);
});
