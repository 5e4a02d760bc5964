/**
 * GET /api/v1/contacts: keyset pagination (no OFFSET) over the whole table or a relevance-
 * ordered search, with opaque signed cursors.
 *
 * Plain list: newest first, `ORDER BY id DESC` (ids are time-ordered and unique); the cursor
 * holds the last id. totalItems comes from the trigger-maintained counter (exact, O(1)).
 *
 * Search: a contact matches when a word of its names or email starts with each word of the
 * term (full-text, prefix query) or, for terms of 3+ characters, when its email or names
 * contain the term (pg_trgm index on `search_text`). Relevance:
 *   2 × exact email + 1 × every term word is a whole word of the contact + ts_rank (names
 *   weigh more than the email's local part, which weighs more than its domain).
 * Order: score DESC, id ASC. The score is a float8 computed identically on every page and
 * the cursor holds (score, id), so a page never repeats or skips a contact that did not
 * change in between. totalItems is the exact number of matches, from the same scan.
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

type ListCursor = { m: 'l'; i: string };
type SearchCursor = { m: 's'; h: string; s: number; i: string };

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
  const c = v.data as { m?: unknown; i?: unknown; h?: unknown; s?: unknown };
  if (typeof c !== 'object' || c === null || typeof c.i !== 'string') invalidCursor();
  if (c.m === 'l') return { m: 'l', i: c.i };
  if (c.m === 's' && typeof c.h === 'string' && typeof c.s === 'number' && Number.isFinite(c.s)) return { m: 's', h: c.h, s: c.s, i: c.i };
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

/** Words of a term as the search documents split them (letters and digits). */
function termWords(term: string): string[] {
  return term
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean)
    .slice(0, CONTACT_LIST.searchMaxWords);
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
  // A term with `@` is an address (or part of one): matched as text, exact address first.
  // Its words (`gmail`, `com`) would otherwise turn into prefix queries matching most rows.
  const words = term.includes('@') ? [] : termWords(term);
  const substring = term.length >= CONTACT_LIST.substringMinLength;
  if (words.length === 0 && !substring) {
    return { data: [], pagination: { limit, totalItems: 0, cursor: null, isDone: true } };
  }

  // Parameters are numbered as they are added, so each query only carries the ones it uses.
  const params = (args: unknown[]) => (v: unknown) => {
    args.push(v);
    return `$${args.length}`;
  };
  const like = `%${term.replace(/[\\%_]/g, '\\$&')}%`;
  const prefixQuery = words.map((w) => `${w}:*`).join(' & ');
  const matchWhere = (p: (v: unknown) => string) => {
    const m: string[] = [];
    if (words.length) m.push(`search_tsv @@ to_tsquery('simple', ${p(prefixQuery)})`);
    if (substring) m.push(`search_text LIKE ${p(like)}`);
    return m.join(' OR ');
  };

  const args: unknown[] = [];
  const p = params(args);
  const where = matchWhere(p);
  // Words hold only letters and digits, so they are safe inside a tsquery.
  const rank = words.length
    ? `ts_rank(search_tsv, to_tsquery('simple', ${p(prefixQuery)}))::float8 + CASE WHEN search_tsv @@ to_tsquery('simple', ${p(words.join(' & '))}) THEN 1 ELSE 0 END`
    : '0::float8';
  const score = `(${rank} + CASE WHEN lower(email) = ${p(term)} THEN 2 ELSE 0 END)::float8`;
  const after = cursor ? `WHERE score < ${p(cursor.s)}::float8 OR (score = $${args.length}::float8 AND id > ${p(cursor.i)})` : '';
  // Scores and the count ride on (id, score) only; the page's columns are read for its rows.
  const sql = `
    SELECT ${CONTACT_COLUMNS.split(', ').map((col) => `c.${col}`).join(', ')}, m.score, m.total
      FROM (
        SELECT id, score, total FROM (
          SELECT id, ${score} AS score, count(*) OVER () AS total FROM contacts WHERE ${where}
        ) s
        ${after}
        ORDER BY score DESC, id ASC
        LIMIT ${p(limit + 1)}
      ) m
      JOIN contacts c ON c.id = m.id
     ORDER BY m.score DESC, m.id ASC`;
  const r = await db.query<ContactRow & { score: number; total: number }>(sql, args);
  const more = r.rows.length > limit;
  const page = r.rows.slice(0, limit);
  const last = page[page.length - 1];
  let total = r.rows[0]?.total ?? (cursor ? undefined : 0);
  if (total === undefined) {
    // A cursor past the last match leaves no row to carry the window count.
    const countArgs: unknown[] = [];
    const c = await db.query<{ n: number }>(`SELECT count(*) AS n FROM contacts WHERE ${matchWhere(params(countArgs))}`, countArgs);
    total = c.rows[0]?.n ?? 0;
  }
  return {
    data: page.map(toContact),
    pagination: {
      limit,
      totalItems: Number(total),
      cursor: more && last ? signer.sign(CURSOR_PURPOSE, { m: 's', h: hash, s: Number(last.score), i: last.id } satisfies SearchCursor, expires) : null,
      isDone: !more,
    },
  };
}
