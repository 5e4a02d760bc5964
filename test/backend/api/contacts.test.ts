/** /api/v1/contacts over real HTTP: CRUD, validation, the error envelope, pagination and search. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/shared/clock.js';
import { newId } from '../../../src/shared/crypto.js';
import { migrate } from '../../../src/shared/db/migrate.js';
import { loadSigner } from '../../../src/shared/signing.js';
import { MIGRATIONS } from '../../../src/shared/db/migrations/index.js';
import { createEmptyDatabase } from '../../harness/db.js';
import { startApi, type Api, type Res } from './helpers.js';

function expectInvalid(r: Res, messagePart?: string) {
  expect(r.status, JSON.stringify(r.body)).toBe(400);
  expect(r.body.error.category).toBe('invalid_input');
  if (messagePart) expect(r.body.error.message).toContain(messagePart);
}

/** Inserts contacts directly (the API is rate limited; walking is what is under test). */
async function seed(api: Api, rows: { email: string; firstName?: string | null; lastName?: string | null }[], baseMs: number): Promise<string[]> {
  const ids = rows.map((_, i) => newId('ct', baseMs + i));
  await api.app.db.pool.query(
    `INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at)
     SELECT id, email, f, l, 'api', $5, $5 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(id, email, f, l)`,
    [ids, rows.map((r) => r.email), rows.map((r) => r.firstName ?? null), rows.map((r) => r.lastName ?? null), new Date(baseMs)],
  );
  return ids;
}

async function walk(api: Api, key: string, query: string): Promise<{ ids: string[]; pages: number; totals: number[] }> {
  const ids: string[] = [];
  const totals: number[] = [];
  let cursor: string | null = null;
  let pages = 0;
  for (;;) {
    const q = query + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : '');
    const r = await api.call('GET', `/api/v1/contacts?${q}`, { key });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    pages++;
    ids.push(...r.body.data.map((c: any) => c.id));
    totals.push(r.body.pagination.totalItems);
    if (r.body.pagination.isDone) {
      expect(r.body.pagination.cursor).toBeNull();
      break;
    }
    expect(typeof r.body.pagination.cursor).toBe('string');
    cursor = r.body.pagination.cursor;
    if (pages > 500) throw new Error('walk did not end');
  }
  return { ids, pages, totals };
}

describe('contacts', () => {
  let api: Api;
  let key: string;
  const clock = new ManualClock();
  beforeAll(async () => {
    api = await startApi({ clock, tickMs: 200 });
    key = await api.key(['contacts:read', 'contacts:write']);
  });
  afterAll(async () => api?.close());

  describe('create, get, update, delete', () => {
    it('creates with 201 and source api, normalizing the address', async () => {
      const r = await api.call('POST', '/api/v1/contacts', { key, body: { email: '  Jane.Doe@EXAMPLE.com ', firstName: ' Jane ', lastName: 'Doe' } });
      expect(r.status).toBe(201);
      const c = r.body.data;
      expect(c).toMatchObject({ email: 'Jane.Doe@example.com', firstName: 'Jane', lastName: 'Doe', source: 'api' });
      expect(c.id).toMatch(/^ct_[0-9a-z]{26}$/);
      expect(c.createdAt).toBe(new Date(clock.now()).toISOString());
      expect(c.updatedAt).toBe(c.createdAt);
      expect(Object.keys(c).sort()).toEqual(['createdAt', 'email', 'firstName', 'id', 'lastName', 'source', 'updatedAt']);
    });

    it('an internationalized domain is stored in its ASCII form; names are optional (null)', async () => {
      const r = await api.call('POST', '/api/v1/contacts', { key, body: { email: 'hans@Bücher.example' } });
      expect(r.status).toBe(201);
      expect(r.body.data).toMatchObject({ email: 'hans@xn--bcher-kva.example', firstName: null, lastName: null });
    });

    it('refuses a duplicate email case-insensitively with 409 conflict', async () => {
      const r = await api.call('POST', '/api/v1/contacts', { key, body: { email: 'jane.doe@example.COM' } });
      expect(r.status).toBe(409);
      expect(r.body.error).toMatchObject({ category: 'conflict', data: { reason: 'duplicate_email' } });
    });

    it('refuses invalid addresses with 400 and stores nothing', async () => {
      const before = (await api.app.db.pool.query('SELECT count(*) AS n FROM contacts')).rows[0].n;
      for (const email of ['', 'plain', '@example.com', 'a@', 'a@b', 'a b@example.com', 'a..b@example.com', '.a@example.com', 'a@-x.com', 'a@example.123', `${'a'.repeat(65)}@example.com`, 'ü@example.com', 'a@exa_mple.com']) {
        expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: { email } }));
      }
      expect((await api.app.db.pool.query('SELECT count(*) AS n FROM contacts')).rows[0].n).toBe(before);
    });

    it('gets by id and by URL-encoded email (any case); unknown is 404 not_found', async () => {
      const created = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'get+tag@example.com', firstName: 'G' } })).body.data;
      for (const id of [created.id, encodeURIComponent('get+tag@example.com'), encodeURIComponent('GET+TAG@Example.com')]) {
        const r = await api.call('GET', `/api/v1/contacts/${id}`, { key });
        expect(r.status).toBe(200);
        expect(r.body.data).toEqual(created);
      }
      for (const id of ['ct_doesnotexist', encodeURIComponent('nobody@example.com')]) {
        const r = await api.call('GET', `/api/v1/contacts/${id}`, { key });
        expect(r.status).toBe(404);
        expect(r.body.error).toEqual({ message: 'Contact not found', category: 'not_found', data: { reason: 'contact_not_found' } });
      }
    });

    it('PUT updates only the fields given; null or empty clears a name', async () => {
      const c = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'put@example.com', firstName: 'Pat', lastName: 'Old' } })).body.data;
      clock.advance(5000);
      let r = await api.call('PUT', `/api/v1/contacts/${c.id}`, { key, body: { lastName: 'New' } });
      expect(r.status).toBe(200);
      expect(r.body.data).toMatchObject({ id: c.id, email: 'put@example.com', firstName: 'Pat', lastName: 'New', createdAt: c.createdAt });
      expect(r.body.data.updatedAt > c.updatedAt).toBe(true);
      r = await api.call('PUT', `/api/v1/contacts/${encodeURIComponent('PUT@example.com')}`, { key, body: { firstName: null, lastName: '', email: 'Put2@Example.com' } });
      expect(r.body.data).toMatchObject({ email: 'Put2@example.com', firstName: null, lastName: null });
      r = await api.call('PUT', `/api/v1/contacts/${c.id}`, { key, body: {} });
      expect(r.status).toBe(200);
      expect(r.body.data.email).toBe('Put2@example.com');
    });

    it('PUT to an email another contact has is 409; to an unknown contact 404; bad email 400', async () => {
      const c = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'mover@example.com' } })).body.data;
      const r = await api.call('PUT', `/api/v1/contacts/${c.id}`, { key, body: { email: 'JANE.DOE@example.com' } });
      expect(r.status).toBe(409);
      expect(r.body.error.category).toBe('conflict');
      expect((await api.call('GET', `/api/v1/contacts/${c.id}`, { key })).body.data.email).toBe('mover@example.com');
      expect((await api.call('PUT', '/api/v1/contacts/ct_nope', { key, body: { firstName: 'x' } })).status).toBe(404);
      expectInvalid(await api.call('PUT', `/api/v1/contacts/${c.id}`, { key, body: { email: 'not-an-email' } }));
    });

    it('DELETE answers 200 with the deleted contact id; then 404', async () => {
      const c = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'gone@example.com' } })).body.data;
      const r = await api.call('DELETE', `/api/v1/contacts/${encodeURIComponent('gone@example.com')}`, { key, headers: { 'content-type': 'application/json' } });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ data: { id: c.id, email: 'gone@example.com', deleted: true } });
      expect((await api.call('GET', `/api/v1/contacts/${c.id}`, { key })).status).toBe(404);
      expect((await api.call('DELETE', `/api/v1/contacts/${c.id}`, { key })).status).toBe(404);
    });
  });

  describe('malformed requests', () => {
    it('malformed JSON, wrong content type, unknown fields, wrong types, oversized bodies: 400 saying what is wrong', async () => {
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, raw: '{"email": ', headers: { 'content-type': 'application/json' } }), 'not valid JSON');
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, raw: 'email=a@example.com', headers: { 'content-type': 'text/plain' } }), 'Content-Type');
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: { email: 'x@example.com', phone: '1' } }), 'Unknown field: body.phone');
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: { firstName: 'x' } }), 'Missing required field: body.email');
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: { email: 5 } }), 'body.email');
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: ['a'] }));
      expectInvalid(await api.call('POST', '/api/v1/contacts', { key, body: { email: 'big@example.com', firstName: 'x'.repeat(2 * 1024 * 1024) } }), 'too large');
      expect((await api.call('GET', `/api/v1/contacts/${encodeURIComponent('x@example.com')}`, { key })).status).toBe(404);
    });

    it('limit above 100, below 1 or not a number is 400; the default is 25', async () => {
      for (const l of ['101', '0', '-1', 'abc', '2.5']) expectInvalid(await api.call('GET', `/api/v1/contacts?limit=${l}`, { key }), 'limit');
      expectInvalid(await api.call('GET', '/api/v1/contacts?foo=1', { key }), 'Unknown field');
      const r = await api.call('GET', '/api/v1/contacts?limit=100', { key });
      expect(r.body.pagination.limit).toBe(100);
      expect((await api.call('GET', '/api/v1/contacts', { key })).body.pagination.limit).toBe(25);
    });
  });
});

describe('contact pagination and search', () => {
  let api: Api;
  let key: string;
  const clock = new ManualClock();
  let all: string[];

  beforeAll(async () => {
    api = await startApi({ clock, tickMs: 200 });
    key = await api.key(['contacts:read', 'contacts:write']);
    const rows = Array.from({ length: 1234 }, (_, i) => ({ email: `member${i}@walk.example`, firstName: `First${i % 50}`, lastName: 'Walker' }));
    // Same created_at for many rows and ids minted in one millisecond range: order must still be total.
    all = await seed(api, rows, Date.UTC(2025, 5, 1));
  });
  afterAll(async () => api?.close());

  it('walking the cursors of 1,234 contacts returns each exactly once, newest first, with totalItems 1234', async () => {
    const { ids, pages, totals } = await walk(api, key, 'limit=100');
    expect(pages).toBe(13);
    expect(ids.length).toBe(1234);
    expect(new Set(ids).size).toBe(1234);
    expect(new Set(ids)).toEqual(new Set(all));
    expect(ids).toEqual([...ids].sort().reverse());
    expect(new Set(totals)).toEqual(new Set([1234]));
  }, 60_000);

  it('small pages walk the same sequence; the last page has cursor null', async () => {
    const big = (await walk(api, key, 'limit=100')).ids;
    const small = await walk(api, key, 'limit=97');
    expect(small.ids).toEqual(big);
    expect(small.pages).toBe(Math.ceil(1234 / 97));
  }, 60_000);

  it('contacts deleted or added during a walk never make it repeat or skip the others', async () => {
    const first = await api.call('GET', '/api/v1/contacts?limit=50', { key });
    const seen: string[] = first.body.data.map((c: any) => c.id);
    // Delete the contact the cursor points at and one further on; add a new one.
    const victim = seen[seen.length - 1];
    const later = all.slice().sort().reverse()[300];
    await api.app.db.pool.query('DELETE FROM contacts WHERE id = ANY($1)', [[victim, later]]);
    const added = (await api.call('POST', '/api/v1/contacts', { key, body: { email: 'new-during-walk@walk.example' } })).body.data.id;
    let cursor = first.body.pagination.cursor;
    while (cursor) {
      const r = await api.call('GET', `/api/v1/contacts?limit=100&cursor=${encodeURIComponent(cursor)}`, { key });
      seen.push(...r.body.data.map((c: any) => c.id));
      cursor = r.body.pagination.cursor;
    }
    expect(new Set(seen).size).toBe(seen.length);
    const expected = all.filter((id) => id !== later);
    expect(new Set(seen)).toEqual(new Set(expected));
    expect(seen).not.toContain(added); // newer than the walk's start: before the cursor
    await api.app.db.pool.query('DELETE FROM contacts WHERE id = $1', [added]);
    const restored = await seed(api, [{ email: 'member-restore-a@walk.example' }], Date.UTC(2025, 5, 1));
    all = all.filter((id) => id !== victim && id !== later).concat(restored);
    expect((await api.call('GET', '/api/v1/contacts?limit=1', { key })).body.pagination.totalItems).toBe(1233);
  }, 60_000);

  it('a forged, tampered, foreign or expired cursor is 400 invalid_input, never a 500 or a wrong page', async () => {
    const r = await api.call('GET', '/api/v1/contacts?limit=5', { key });
    const cursor: string = r.body.pagination.cursor;
    const [body, mac] = cursor.split('.');
    const payload = JSON.parse(Buffer.from(body, 'base64url').toString());
    const forgedBody = Buffer.from(JSON.stringify({ ...payload, d: { ...payload.d, i: 'ct_0' } })).toString('base64url');
    const flip = (s: string) => (s[0] === 'A' ? 'B' : 'A') + s.slice(1);
    const forged = [
      'garbage',
      `${forgedBody}.${mac}`,
      `${body}.${flip(mac)}`,
      `${body}.`,
      `.${mac}`,
      `${body}.${mac}.x`,
      Buffer.from(JSON.stringify({ d: { m: 'l', i: 'ct_0' } })).toString('base64url') + '.AAAAAAAAAAAAAAAAAAAAAA',
      '%00%ff',
    ];
    for (const c of forged) {
      const res = await api.call('GET', `/api/v1/contacts?cursor=${encodeURIComponent(c)}`, { key });
      expectInvalid(res);
      expect(res.body.error.data.reason).toBe('invalid_cursor');
    }
    // A list cursor used for a search (and the reverse) is refused.
    expectInvalid(await api.call('GET', `/api/v1/contacts?search=walker&cursor=${encodeURIComponent(cursor)}`, { key }), 'cursor');
    const s = await api.call('GET', '/api/v1/contacts?search=walker&limit=5', { key });
    expectInvalid(await api.call('GET', `/api/v1/contacts?cursor=${encodeURIComponent(s.body.pagination.cursor)}`, { key }), 'cursor');
    expectInvalid(await api.call('GET', `/api/v1/contacts?search=walkers&cursor=${encodeURIComponent(s.body.pagination.cursor)}`, { key }), 'cursor');
    // A genuinely signed search cursor of the earlier format (score instead of tier) is refused.
    const current = JSON.parse(Buffer.from(s.body.pagination.cursor.split('.')[0], 'base64url').toString()).d;
    const signer = await loadSigner(api.app.db.pool);
    const old = signer.sign('contacts.cursor', { m: 's', h: current.h, s: 1.25, i: current.i }, { expiresAt: clock.now() + 60_000 });
    const oldRes = await api.call('GET', `/api/v1/contacts?search=walker&cursor=${encodeURIComponent(old)}`, { key });
    expectInvalid(oldRes);
    expect(oldRes.body.error.data.reason).toBe('invalid_cursor');
    // Still valid just before the 24 h lifetime ends, refused after.
    clock.advance(24 * 3600 * 1000 - 10_000);
    expect((await api.call('GET', `/api/v1/contacts?cursor=${encodeURIComponent(cursor)}`, { key })).status).toBe(200);
    clock.advance(20_000);
    const expired = await api.call('GET', `/api/v1/contacts?cursor=${encodeURIComponent(cursor)}`, { key });
    expectInvalid(expired, 'expired');
    expect(expired.body.error.data.reason).toBe('cursor_expired');
  });

  describe('search', () => {
    // Relevance tiers for "anna": whole word in names > whole word of the email > word prefix > substring only.
    const exact = { email: 'anna@tiers.example', firstName: 'Zed', lastName: 'Exact' };
    const wholeWord = Array.from({ length: 40 }, (_, i) => ({ email: `w${i}@tiers.example`, firstName: 'Anna', lastName: `Whole${i}` }));
    const emailWord = Array.from({ length: 20 }, (_, i) => ({ email: `anna.${i}@tiers.example`, firstName: 'Zed', lastName: `Mail${i}` }));
    const prefix = Array.from({ length: 30 }, (_, i) => ({ email: `p${i}@tiers.example`, firstName: 'Annabel', lastName: `Prefix${i}` }));
    const substring = Array.from({ length: 25 }, (_, i) => ({ email: `joanna${i}@tiers.example`, firstName: 'Zed', lastName: `Sub${i}` }));
    const noise = Array.from({ length: 30 }, (_, i) => ({ email: `noise${i}@tiers.example`, firstName: 'Hana', lastName: 'Ann' }));
    const ids: Record<string, string[]> = {};

    beforeAll(async () => {
      let t = Date.UTC(2025, 7, 1);
      for (const [name, rows] of Object.entries({ exact: [exact], wholeWord, emailWord, prefix, substring, noise })) {
        ids[name] = await seed(api, rows, (t += 10_000));
      }
    });

    it('a search spanning pages returns each match once, ordered by relevance, with exact totalItems', async () => {
      const { ids: got, pages, totals } = await walk(api, key, 'search=anna&limit=7');
      const expected = [...ids.wholeWord, ...ids.exact, ...ids.emailWord, ...ids.prefix, ...ids.substring];
      expect(pages).toBe(Math.ceil(expected.length / 7));
      expect(got.length).toBe(expected.length);
      expect(new Set(got)).toEqual(new Set(expected));
      expect(new Set(totals)).toEqual(new Set([expected.length]));
      // Tier order: whole words (names before the email's words), then prefixes, then substrings only.
      const pos = (set: string[]) => set.map((id) => got.indexOf(id));
      const emailWords = [...pos(ids.exact), ...pos(ids.emailWord)];
      expect(Math.max(...pos(ids.wholeWord))).toBeLessThan(Math.min(...emailWords));
      expect(Math.max(...emailWords)).toBeLessThan(Math.min(...pos(ids.prefix)));
      expect(Math.max(...pos(ids.prefix))).toBeLessThan(Math.min(...pos(ids.substring)));
      // Within a tier (equal scores) the order is by id.
      expect(got.slice(0, 40)).toEqual([...ids.wholeWord].sort());
      // Same order in one page as across seven-item pages.
      const one = await api.call('GET', '/api/v1/contacts?search=anna&limit=100', { key });
      const two = await api.call('GET', `/api/v1/contacts?search=anna&limit=100&cursor=${encodeURIComponent(one.body.pagination.cursor)}`, { key });
      expect([...one.body.data, ...two.body.data].map((c: any) => c.id)).toEqual(got);
    }, 60_000);

    it('is case-insensitive, matches several words and email parts, and finds nothing for unknown terms', async () => {
      const a = await api.call('GET', '/api/v1/contacts?search=%20ANNA%20', { key });
      expect(a.body.pagination.totalItems).toBe(116);
      const two = await api.call('GET', `/api/v1/contacts?search=${encodeURIComponent('anna whole3')}&limit=100`, { key });
      expect(two.body.data.map((c: any) => c.lastName).sort()).toEqual(['Whole3', 'Whole30', 'Whole31', 'Whole32', 'Whole33', 'Whole34', 'Whole35', 'Whole36', 'Whole37', 'Whole38', 'Whole39']);
      expect(two.body.data[0].lastName).toBe('Whole3'); // the whole-word match ranks first
      const domain = await api.call('GET', '/api/v1/contacts?search=tiers.example&limit=1', { key });
      expect(domain.body.pagination.totalItems).toBe(146);
      const none = await api.call('GET', '/api/v1/contacts?search=zzqqxx', { key });
      expect(none.body).toEqual({ data: [], pagination: { limit: 25, totalItems: 0, cursor: null, isDone: true } });
      const symbols = await api.call('GET', `/api/v1/contacts?search=${encodeURIComponent("%_\\'&|!:*")}`, { key });
      expect(symbols.status).toBe(200);
      expect(symbols.body.data).toEqual([]);
      const empty = await api.call('GET', '/api/v1/contacts?search=&limit=1', { key });
      expect(empty.body.pagination.totalItems).toBeGreaterThan(1000); // empty search = plain list
      expectInvalid(await api.call('GET', `/api/v1/contacts?search=${'a'.repeat(201)}`, { key }), 'search');
    });

    it('finds a contact by exact email first, and by a substring of the address', async () => {
      const r = await api.call('GET', `/api/v1/contacts?search=${encodeURIComponent('Anna@Tiers.example')}&limit=3`, { key });
      expect(r.body.data[0].id).toBe(ids.exact[0]);
      const sub = await api.call('GET', '/api/v1/contacts?search=oanna1&limit=100', { key });
      expect(sub.body.data.map((c: any) => c.email).sort()).toEqual(
        ['joanna1@tiers.example', ...Array.from({ length: 10 }, (_, i) => `joanna1${i}@tiers.example`)].sort(),
      );
    });
  });
});

/**
 * The search rules of docs/api.md, written independently of the SQL: a contact's words are
 * the letter/digit runs of its names, its local part (and the local part cut where its first
 * or last name of 3+ characters begins) and its domain; a term word matches at the start of
 * a word (whole word: names 1, local part 2, domain 3; prefix 4) or, with 3+ characters,
 * inside a name word or local-part piece (5). Tier = worst over the term's words.
 */
type Person = { email: string; firstName: string | null; lastName: string | null };
const split = (s: string) => s.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean); // the test data is ASCII
function tierOf(c: Person, term: string): number | null {
  const at = c.email.indexOf('@');
  const local = c.email.slice(0, at).toLowerCase();
  let cut = local;
  for (const n of [c.firstName, c.lastName]) if (n && n.length >= 3) cut = cut.split(n.toLowerCase()).join(` ${n.toLowerCase()}`);
  const kinds = new Map<string, number>();
  const add = (ws: string[], k: number) => ws.forEach((w) => kinds.set(w, (kinds.get(w) ?? 0) | k));
  const names = split(`${c.firstName ?? ''} ${c.lastName ?? ''}`);
  add(names, 1);
  add(split(local), 2);
  add(split(cut), 2);
  add(split(c.email.slice(at + 1)), 4);
  const inner = [...names, ...split(cut)].map((w) => w.slice(1));
  let tier = 0;
  for (const t of new Set(split(term))) {
    const k = kinds.get(t);
    const level =
      k !== undefined ? (k & 1 ? 1 : k & 2 ? 2 : 3) : [...kinds.keys()].some((w) => w.startsWith(t)) ? 4 : t.length >= 3 && inner.some((w) => w.includes(t)) ? 5 : null;
    if (level === null) return null;
    tier = Math.max(tier, level);
  }
  return tier === 0 ? null : tier;
}

describe('search follows the documented rules', () => {
  let api: Api;
  let key: string;
  const clock = new ManualClock();
  const people = new Map<string, Person>();
  const TERMS = ['ann', 'anna', 'annabel', 'oann', 'joanna', 'smith', 'mith', 'son', 'john', 'jo', 'j', 'a', 'mary ann', 'anna smith', 'ohn', 'acme', 'com',
    'co', 'smith co', 'brien', "o'brien", 'li', 'al', 'ng', 'mary-ann', '7', 'x7', 'zz', 'ann ann', 'obrien', 'nsmi'];

  async function expectRules(term: string) {
    const expected = [...people]
      .map(([id, c]) => ({ id, tier: tierOf(c, term) }))
      .filter((m): m is { id: string; tier: number } => m.tier !== null)
      .sort((x, y) => x.tier - y.tier || (x.id < y.id ? -1 : 1))
      .map((m) => m.id);
    const { ids, totals } = await walk(api, key, `search=${encodeURIComponent(term)}&limit=7`);
    expect(ids, term).toEqual(expected);
    expect(new Set(totals), term).toEqual(new Set([expected.length]));
  }

  beforeAll(async () => {
    api = await startApi({ clock, tickMs: 200 });
    key = await api.key(['contacts:read', 'contacts:write']);
    let s = 7;
    const rnd = (n: number) => Math.floor(((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * n);
    const firsts = ['Ann', 'Anna', 'Annabel', 'Joanna', 'Hannah', 'John', 'Jon', 'Johnny', 'Mary', 'Mary-Ann', 'Li', 'Al', null];
    const lasts = ['Smith', 'Smithson', 'Johnson', 'Anderson', 'Goldsmith', 'Ng', "O'Brien", null];
    const domains = ['acme.com', 'smith-co.io', 'mail.anna.org', 'example.com', 'johnson.net'];
    const rows: Person[] = [];
    for (let i = 0; i < 240; i++) {
      const f = firsts[rnd(firsts.length)];
      const l = lasts[rnd(lasts.length)];
      const fl = (f ?? 'x').toLowerCase().replace(/[^a-z]/g, '');
      const ll = (l ?? 'y').toLowerCase().replace(/[^a-z]/g, '');
      let local = [`${fl}.${ll}`, `${fl[0]}${ll}`, `${ll}${i}`, `${fl}${ll}`, 'info', `j.anna.${ll}`, `x7${fl}`][rnd(7)];
      // A third of the addresses end in letters (whole words); repeats get a number.
      if (i % 3 || rows.some((r) => r.email.startsWith(`${local}@`))) local += i;
      rows.push({ email: `${local}@${domains[rnd(domains.length)]}`, firstName: f, lastName: l });
    }
    // Cut before the surname (a fragment across it is not a match); no names, so no cut.
    rows.push({ email: 'annsmith.q@acme.com', firstName: 'Ann', lastName: 'Smith' }, { email: 'jsmithson.q@example.com', firstName: null, lastName: null });
    const ids = await seed(api, rows, Date.UTC(2025, 8, 1));
    ids.forEach((id, i) => people.set(id, rows[i]));
  });
  afterAll(async () => api?.close());

  it('each term returns exactly the contacts the rules match, in tier then id order, with exact totalItems', async () => {
    // `nsmi` occurs in annsmith.q@ of Ann Smith across the cut before "smith": not a match there.
    expect(tierOf({ email: 'annsmith.q@acme.com', firstName: 'Ann', lastName: 'Smith' }, 'nsmi')).toBeNull();
    expect(tierOf({ email: 'jsmithson.q@example.com', firstName: null, lastName: null }, 'smith')).toBe(5);
    for (const term of TERMS) await expectRules(term);
  }, 120_000);

  it('stays exact after contacts are renamed, re-addressed (API and SQL) and deleted', async () => {
    const ids = [...people.keys()];
    // Through the API: names and address changes, a name cleared, a delete.
    const changes: [string, Partial<Person>][] = [
      [ids[0], { firstName: 'Joanna', lastName: 'Smithson' }],
      [ids[1], { email: 'annasmith@acme.com' }],
      [ids[2], { firstName: null, lastName: null }],
      [ids[3], { email: 'obrien.li@mail.anna.org', lastName: 'Li' }],
    ];
    for (const [id, patch] of changes) {
      const r = await api.call('PUT', `/api/v1/contacts/${id}`, { key, body: patch });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      people.set(id, { ...people.get(id)!, ...patch });
    }
    expect((await api.call('DELETE', `/api/v1/contacts/${ids[4]}`, { key })).status).toBe(200);
    people.delete(ids[4]);
    // In SQL, several rows in one statement (as other parts of the product write contacts).
    await api.app.db.pool.query(`UPDATE contacts SET first_name = 'Annabel', last_name = 'Ng' WHERE id = ANY($1)`, [ids.slice(5, 9)]);
    for (const id of ids.slice(5, 9)) people.set(id, { ...people.get(id)!, firstName: 'Annabel', lastName: 'Ng' });
    await api.app.db.pool.query(`UPDATE contacts SET updated_at = updated_at WHERE id = ANY($1)`, [ids.slice(9, 20)]);
    await api.app.db.pool.query('DELETE FROM contacts WHERE id = ANY($1)', [ids.slice(20, 25)]);
    for (const id of ids.slice(20, 25)) people.delete(id);
    for (const term of TERMS) await expectRules(term);
  }, 120_000);

  it('a page boundary inside a tier and between tiers loses and repeats nothing at any page size', async () => {
    const all = (await walk(api, key, 'search=an&limit=100')).ids;
    for (const limit of [1, 2, 3, 5, 11]) expect((await walk(api, key, `search=an&limit=${limit}`)).ids).toEqual(all);
  }, 120_000);

  it('matches letters beyond ASCII, and an address term finds the exact address first, then addresses containing it', async () => {
    const [zoe] = await seed(api, [{ email: 'zoe@umlaut.example', firstName: 'Zoë', lastName: 'Brontë' }], Date.UTC(2025, 9, 1));
    const r = await api.call('GET', `/api/v1/contacts?search=${encodeURIComponent('ZOË BRONT')}`, { key });
    expect(r.body.data.map((c: any) => c.id)).toEqual([zoe]);
    for (const term of ['@smith-co.io', 'n@acme.c', 'anna@', 'smith@j', '@MAIL.anna.org', 'h@ex']) {
      const expected = [...people].filter(([, c]) => c.email.toLowerCase().includes(term.toLowerCase())).map(([id]) => id).sort();
      const { ids, totals } = await walk(api, key, `search=${encodeURIComponent(term)}&limit=9`);
      expect(ids, term).toEqual(expected);
      expect(new Set(totals), term).toEqual(new Set([expected.length]));
      expect(expected.length, term).toBeGreaterThan(0);
    }
    const [someId, some] = [...people].find(([, c]) => c.email.includes('@smith-co.io'))!;
    const exact = await api.call('GET', `/api/v1/contacts?search=${encodeURIComponent(some.email.toUpperCase())}`, { key });
    expect(exact.body.data[0].id).toBe(someId);
  });

  it('the migration indexes contacts that existed before it exactly as the triggers index new ones', async () => {
    const db = await createEmptyDatabase();
    try {
      await migrate(db.pool, undefined, MIGRATIONS.filter((m) => m.id < '011'));
      const rows = [...people.values()];
      const insert = () =>
        db.pool.query(
          `INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at)
           SELECT 'ct_' || n, e, f, l, 'api', now(), now() FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(e, f, l, n)`,
          [rows.map((r) => r.email), rows.map((r) => r.firstName), rows.map((r) => r.lastName)],
        );
      const words = async () => (await db.pool.query(`SELECT word, contact_id, prev, kinds FROM contact_search_words ORDER BY contact_id, word`)).rows;
      await insert();
      await migrate(db.pool);
      const backfilled = await words();
      expect(backfilled.length).toBeGreaterThan(rows.length * 3);
      await db.pool.query('DELETE FROM contacts');
      expect(await words()).toEqual([]);
      await insert();
      expect(await words()).toEqual(backfilled);
    } finally {
      await db.drop();
    }
  });
});
