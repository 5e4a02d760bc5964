/**
 * GET /api/v1/contacts: keyset pagination (no OFFSET) over the whole table or a relevance-
 * ordered search, with opaque signed cursors.
 *
 * Plain list: newest first, `ORDER BY id DESC` (ids are time-ordered and unique); the cursor
 * holds the last id. totalItems comes from the trigger-maintained counter (exact, O(1)).
 *
 * Search (data: migration 011). Words are lower-cased runs of letters and digits; a
 * contact's words are those of its names, of its email's local part (also cut where its
 * first or last name begins: `jsmith` gives `smith`) and of its domain. A contact matches
 * when every word of the term starts one of its words or, for term words of 3+ characters,
 * occurs inside a name word or local-part piece. Relevance is a tier (SEARCH_TIER), the
 * worst over the term's words; ties are ordered by id, so the order is total and the cursor
 * holds (tier, id): a page never repeats or skips a contact that did not change in between.
 * Terms containing `@` are addresses: the exact address first, then addresses containing it.
 *
 * Cost is bounded by index work, not heap reads (`contact_search_words`, index-only):
 * - one-word terms walk tier by tier in id order (whole-word tiers read a page's worth of
 *   index entries; the prefix tier reads the term's prefix range), and totalItems counts the
 *   prefix range once per contact (`prev`) plus the contacts found only inside a word;
 * - several words join their per-word sets (cost grows with the commonest word's set).
 *
 * Cursors are bound to the mode and the search term (a SHA-256 prefix), signed with the
 * instance key (purpose `contacts.cursor`) and expire after CONTACT_LIST.cursorTtlMs.
 */
import { sha256Hex } from '../../shared/crypto.js';
import { badInput } from '../../shared/errors.js';
import type { Signer } from '../../shared/signing.js';
import { CONTACT_COLUMNS, countContacts, toContact, type Contact, type ContactRow, type Queryable } from './contacts.js';
import { CONTACT_LIST } from './policy.js';

const CURSOR_PURPOSE = 'contacts.cursor';

/** Search relevance, best first (documented in docs/api.md). */
export const SEARCH_TIER = {
  /** The term is the contact's address (terms with `@`). */
  exactEmail: 0,
  /** Every term word is a whole word of the contact's names. */
  nameWord: 1,
  /** Every term word is a whole word of the names or of the email's local part. */
  localWord: 2,
  /** Every term word is a whole word of the contact (the domain's words included). */
  domainWord: 3,
  /** Every term word starts a word of the contact. */
  wordPrefix: 4,
  /** Some term word occurs only inside a word (or, for `@` terms, inside the address). */
  inside: 5,
} as const;
const MAX_TIER = SEARCH_TIER.inside;

type ListCursor = { m: 'l'; i: string };
type SearchCursor = { m: 's'; h: string; t: number; i: string };

export interface ContactPage {
  data: Contact[];
  pagination: { limit: number; totalItems: number; cursor: string | null; isDone: boolean };
}

export interface ListInput {
  limit: number;
  cursor?: string;
  search?: string;
}

/** Lower-cased, trimmed, inner whitespace collapsed; '' means "no search". */
export function normalizeSearch(raw: string | undefined): string {
  return (raw ?? '').normalize('NFC').trim().replace(/\s+/g, ' ').toLowerCase();
}

function termHash(term: string): string {
  return sha256Hex(term).slice(0, 16);
}

function invalidCursor(): never {
  throw badInput('Invalid cursor: pass the cursor of the previous page of this same listing or search unchanged', 'invalid_cursor');
}

function readCursor(signer: Signer, token: string, now: number): ListCursor | SearchCursor {
  const v = signer.verify<ListCursor | SearchCursor>(CURSOR_PURPOSE, token, now);
  if (!v.ok) {
    if (v.reason === 'expired') throw badInput('Cursor expired: start again from the first page', 'cursor_expired');
    invalidCursor();
  }
  const c = v.data as { m?: unknown; i?: unknown; h?: unknown; t?: unknown };
  if (typeof c !== 'object' || c === null || typeof c.i !== 'string') invalidCursor();
  if (c.m === 'l') return { m: 'l', i: c.i };
  if (c.m === 's' && typeof c.h === 'string' && typeof c.t === 'number' && Number.isInteger(c.t) && c.t >= 0 && c.t <= MAX_TIER) {
    return { m: 's', h: c.h, t: c.t, i: c.i };
  }
  invalidCursor();
}

/** The cursor the plain list hands out after `lastId` (benchmarks jump to any depth with it). */
export function signListCursor(signer: Signer, lastId: string, expiresAt: number): string {
  return signer.sign(CURSOR_PURPOSE, { m: 'l', i: lastId } satisfies ListCursor, { expiresAt });
}

export async function listContacts(db: Queryable, signer: Signer, input: ListInput, now: number): Promise<ContactPage> {
  const term = normalizeSearch(input.search);
  if (term.length > CONTACT_LIST.searchMaxLength) {
    throw badInput(`search must be at most ${CONTACT_LIST.searchMaxLength} characters`, 'validation_error');
  }
  const cursor = input.cursor ? readCursor(signer, input.cursor, now) : undefined;
  const expires = { expiresAt: now + CONTACT_LIST.cursorTtlMs };
  return term ? search(db, signer, term, input.limit, cursor, expires) : list(db, signer, input.limit, cursor, expires);
}

async function list(db: Queryable, signer: Signer, limit: number, cursor: ListCursor | SearchCursor | undefined, expires: { expiresAt: number }): Promise<ContactPage> {
  if (cursor && cursor.m !== 'l') throw badInput('This cursor belongs to a search: pass the same search parameter', 'invalid_cursor');
  const [rows, total] = await Promise.all([
    cursor
      ? db.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id < $1 ORDER BY id DESC LIMIT $2`, [cursor.i, limit + 1])
      : db.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts ORDER BY id DESC LIMIT $1`, [limit + 1]),
    countContacts(db),
  ]);
  const more = rows.rows.length > limit;
  const page = rows.rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    data: page.map(toContact),
    pagination: {
      limit,
      totalItems: total,
      cursor: more && last ? signListCursor(signer, last.id, expires.expiresAt) : null,
      isDone: !more,
    },
  };
}

/**
 * Distinct words of a term, split by PostgreSQL exactly as lm_contact_words splits contacts
 * (same lower() and [[:alnum:]] under the server's locale), so a term and the words it
 * should find never disagree on what a letter is.
 */
async function termWords(db: Queryable, term: string): Promise<string[]> {
  const r = await db.query<{ w: string[] }>(`SELECT array_remove(regexp_split_to_array(lower($1), '[^[:alnum:]]+'), '') AS w`, [term]);
  return [...new Set(r.rows[0]?.w ?? [])].slice(0, CONTACT_LIST.searchMaxWords);
}

/** Upper bound of a word's prefix range in "C" order (U+10FFFF is never part of a word). */
const rangeEnd = (word: string) => `${word}\u{10FFFF}`;

/** SQL builder that numbers parameters as they are added. */
class Params {
  readonly values: unknown[] = [];
  add(v: unknown): string {
    this.values.push(v);
    return `$${this.values.length}`;
  }
}

/**
 * A contact (SQL expression `id`) has a word in the prefix range [w, end). Written as a range
 * (not `left(word, n) = w`) so the planner can pick a hash anti-join over the range when
 * many contacts are checked, or a probe by contact when few are.
 */
const hasWordStarting = (id: string, w: string, end: string) =>
  `EXISTS (SELECT 1 FROM contact_search_words x WHERE x.contact_id = ${id} AND x.word >= ${w} AND x.word < ${end})`;

interface Hit {
  id: string;
  tier: number;
}

interface SearchResult {
  hits: Hit[];
  total: number;
}

async function search(
  db: Queryable,
  signer: Signer,
  term: string,
  limit: number,
  cursor: ListCursor | SearchCursor | undefined,
  expires: { expiresAt: number },
): Promise<ContactPage> {
  const hash = termHash(term);
  if (cursor && (cursor.m !== 's' || cursor.h !== hash)) {
    throw badInput('This cursor belongs to another listing or search term: pass the same search parameter', 'invalid_cursor');
  }
  const after = cursor as SearchCursor | undefined;
  // A term with `@` is an address (or part of one): its words (`gmail`, `com`) would match
  // most contacts, so it is matched as text against the address only.
  let result: SearchResult;
  if (term.includes('@')) {
    result = term.length >= CONTACT_LIST.substringMinLength ? await searchAddress(db, term, limit + 1, after) : { hits: [], total: 0 };
  } else {
    const words = await termWords(db, term);
    if (words.length === 0) result = { hits: [], total: 0 };
    else if (words.length === 1) result = await searchWord(db, words[0], limit + 1, after);
    else result = await searchWords(db, words, limit + 1, after);
  }

  const more = result.hits.length > limit;
  const hits = result.hits.slice(0, limit);
  const last = hits[hits.length - 1];
  const rows = hits.length
    ? (await db.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id = ANY($1::text[])`, [hits.map((h) => h.id)])).rows
    : [];
  const byId = new Map(rows.map((r) => [r.id, r]));
  return {
    // A contact deleted between the two reads is left out of this page.
    data: hits.flatMap((h) => {
      const r = byId.get(h.id);
      return r ? [toContact(r)] : [];
    }),
    pagination: {
      limit,
      totalItems: result.total,
      cursor: more && last ? signer.sign(CURSOR_PURPOSE, { m: 's', h: hash, t: last.tier, i: last.id } satisfies SearchCursor, expires) : null,
      isDone: !more,
    },
  };
}

/**
 * One word. totalItems: the contacts with a word in the word's prefix range, each counted on
 * its first word in the range (`prev` before the range), plus the contacts where the word
 * occurs only inside a word. The page: tier after tier, each walked in id order, until
 * `want` hits; the count runs alongside.
 */
async function searchWord(db: Queryable, word: string, want: number, after: SearchCursor | undefined): Promise<SearchResult> {
  const inside = [...word].length >= CONTACT_LIST.substringMinLength;
  const like = `%${word}%`;
  const count = db.query<{ n: string }>(
    `SELECT (SELECT count(*) FROM contact_search_words WHERE word >= $1 AND word < $2 AND (prev IS NULL OR prev < $1))` +
      (inside ? ` + (SELECT count(*) FROM contacts c WHERE c.search_infix LIKE $3 AND NOT ${hasWordStarting('c.id', '$1', '$2')})` : '') +
      ' AS n',
    inside ? [word, rangeEnd(word), like] : [word, rangeEnd(word)],
  );

  const wholeWord = (kinds: string) =>
    `SELECT contact_id AS id FROM contact_search_words WHERE word = $1 AND ${kinds} AND contact_id > $2 ORDER BY contact_id LIMIT $3`;
  const tiers: [number, (from: string, n: number) => [string, unknown[]]][] = [
    [SEARCH_TIER.nameWord, (from, n) => [wholeWord('kinds & 1 <> 0'), [word, from, n]]],
    [SEARCH_TIER.localWord, (from, n) => [wholeWord('kinds & 3 = 2'), [word, from, n]]],
    [SEARCH_TIER.domainWord, (from, n) => [wholeWord('kinds & 3 = 0'), [word, from, n]]],
    [
      SEARCH_TIER.wordPrefix,
      (from, n) => [
        `SELECT contact_id AS id FROM contact_search_words
          WHERE word > $1 AND word < $2 AND (prev IS NULL OR prev < $1) AND contact_id > $3
          ORDER BY contact_id LIMIT $4`,
        [word, rangeEnd(word), from, n],
      ],
    ],
  ];
  if (inside) {
    tiers.push([
      SEARCH_TIER.inside,
      (from, n) => [
        `SELECT c.id FROM contacts c WHERE c.search_infix LIKE $3 AND c.id > $4 AND NOT ${hasWordStarting('c.id', '$1', '$2')} ORDER BY c.id LIMIT $5`,
        [word, rangeEnd(word), like, from, n],
      ],
    ]);
  }

  const walk = async () => {
    const hits: Hit[] = [];
    for (const [tier, query] of tiers) {
      if (after && tier < after.t) continue;
      const [sql, args] = query(after && tier === after.t ? after.i : '', want - hits.length);
      const r = await db.query<{ id: string }>(sql, args);
      for (const row of r.rows) hits.push({ id: row.id, tier });
      if (hits.length >= want) break;
    }
    return hits;
  };
  const [hits, n] = await Promise.all([walk(), count]);
  return { hits, total: Number(n.rows[0]?.n ?? 0) };
}

/**
 * Several words: each word's matching contacts with its level (whole word of the names /
 * local part / domain, prefix, inside), joined on the contact; the tier is the worst level.
 */
async function searchWords(db: Queryable, words: string[], want: number, after: SearchCursor | undefined): Promise<SearchResult> {
  const p = new Params();
  const sets = words.map((word, k) => {
    const w = p.add(word);
    const end = p.add(rangeEnd(word));
    const prefix = `SELECT contact_id AS id,
        CASE WHEN word <> ${w} THEN ${SEARCH_TIER.wordPrefix} WHEN kinds & 1 <> 0 THEN ${SEARCH_TIER.nameWord}
             WHEN kinds & 2 <> 0 THEN ${SEARCH_TIER.localWord} ELSE ${SEARCH_TIER.domainWord} END AS lvl
        FROM contact_search_words WHERE word >= ${w} AND word < ${end} AND (prev IS NULL OR prev < ${w})`;
    const inside =
      [...word].length >= CONTACT_LIST.substringMinLength
        ? ` UNION ALL SELECT c.id, ${SEARCH_TIER.inside} FROM contacts c WHERE c.search_infix LIKE ${p.add(`%${word}%`)} AND NOT ${hasWordStarting('c.id', w, end)}`
        : '';
    return `w${k} AS (${prefix}${inside})`;
  });
  const join = words.map((_, k) => (k === 0 ? 'w0' : `JOIN w${k} ON w${k}.id = w0.id`)).join(' ');
  const tier = `greatest(${words.map((_, k) => `w${k}.lvl`).join(', ')})`;
  return pageOfMatches(db, p, `WITH ${sets.join(', ')}, m AS MATERIALIZED (SELECT w0.id, ${tier} AS tier FROM ${join})`, want, after);
}

/**
 * An address or part of one (`local@domain` fragment): the exact address first, then the
 * addresses containing it, i.e. whose local part ends with the part before the @ and whose
 * domain starts with the part after it (B-tree ranges on the domain and the reversed local part).
 */
async function searchAddress(db: Queryable, term: string, want: number, after: SearchCursor | undefined): Promise<SearchResult> {
  const at = term.indexOf('@');
  const local = term.slice(0, at);
  const domain = term.slice(at + 1);
  const p = new Params();
  const where: string[] = [];
  const prefixOf = (expr: string, prefix: string) => `${expr} >= ${p.add(prefix)} AND ${expr} < ${p.add(rangeEnd(prefix))}`;
  if (domain) where.push(prefixOf(`(lower(split_part(email, '@', 2)) COLLATE "C")`, domain));
  if (local) where.push(prefixOf(`(reverse(lower(split_part(email, '@', 1))) COLLATE "C")`, [...local].reverse().join('')));
  const matches = `SELECT id, CASE WHEN lower(email) = ${p.add(term)} THEN ${SEARCH_TIER.exactEmail} ELSE ${SEARCH_TIER.inside} END AS tier
      FROM contacts WHERE ${where.join(' AND ')}`;
  return pageOfMatches(db, p, `WITH m AS MATERIALIZED (${matches})`, want, after);
}

/** Count and page of a materialized match set `m (id, tier)`. */
async function pageOfMatches(db: Queryable, p: Params, withM: string, want: number, after: SearchCursor | undefined): Promise<SearchResult> {
  const from = after ? `WHERE (tier, id) > (${p.add(after.t)}::int, ${p.add(after.i)}::text)` : '';
  const r = await db.query<{ total: string; id: string | null; tier: number | null }>(
    `${withM}
     SELECT t.total, pg.id, pg.tier
       FROM (SELECT count(*) AS total FROM m) t
       LEFT JOIN LATERAL (SELECT id, tier FROM m ${from} ORDER BY tier, id LIMIT ${p.add(want)}) pg ON true`,
    p.values,
  );
  return {
    total: Number(r.rows[0]?.total ?? 0),
    hits: r.rows.filter((row) => row.id !== null).map((row) => ({ id: row.id!, tier: Number(row.tier) })),
  };
}
