/**
 * The contacts table: reads and writes used by the REST API and, through these functions,
 * by other areas (forms create contacts with source `form`).
 */
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db, DbClient } from '../../shared/db/pool.js';

export type Queryable = Db | DbClient;

export interface Contact {
  id: string;
  email: string;
  firstName: string | null;
  lastName: string | null;
  source: string;
  createdAt: string;
  updatedAt: string;
}

export const CONTACT_COLUMNS = 'id, email, first_name, last_name, source, created_at, updated_at';

export interface ContactRow {
  id: string;
  email: string;
  first_name: string | null;
  last_name: string | null;
  source: string;
  created_at: Date;
  updated_at: Date;
}

export const toContact = (r: ContactRow): Contact => ({
  id: r.id,
  email: r.email,
  firstName: r.first_name,
  lastName: r.last_name,
  source: r.source,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

/** `:id` of the API: an email when it contains `@`, otherwise a contact id. */
export async function findContact(q: Queryable, idOrEmail: string, opts: { forUpdate?: boolean } = {}): Promise<Contact | null> {
  const lock = opts.forUpdate ? ' FOR UPDATE' : '';
  const r = idOrEmail.includes('@')
    ? await q.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE lower(email) = lower($1)${lock}`, [idOrEmail])
    : await q.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id = $1${lock}`, [idOrEmail]);
  return r.rows[0] ? toContact(r.rows[0]) : null;
}

export interface NewContact {
  email: string;
  firstName?: string | null;
  lastName?: string | null;
  source: string;
}

/** Inserts a contact; null when the email (case-insensitively) already exists. */
export async function insertContact(q: Queryable, c: NewContact, nowMs: number): Promise<Contact | null> {
  const now = new Date(nowMs);
  const r = await q.query<ContactRow>(
    `INSERT INTO contacts (id, email, first_name, last_name, source, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6)
     ON CONFLICT ((lower(email))) DO NOTHING
     RETURNING ${CONTACT_COLUMNS}`,
    [newId('ct', nowMs), c.email, c.firstName ?? null, c.lastName ?? null, c.source, now],
  );
  return r.rows[0] ? toContact(r.rows[0]) : null;
}

export interface ContactPatch {
  email?: string;
  firstName?: string | null;
  lastName?: string | null;
}

/**
 * Applies the fields present in `patch`. Returns the contact, 'duplicate' when the new email
 * belongs to another contact, or null when the contact does not exist.
 */
export async function updateContact(q: Queryable, id: string, patch: ContactPatch, nowMs: number): Promise<Contact | 'duplicate' | null> {
  const sets: string[] = [];
  const args: unknown[] = [id];
  const add = (col: string, v: unknown) => {
    args.push(v);
    sets.push(`${col} = $${args.length}`);
  };
  if (patch.email !== undefined) add('email', patch.email);
  if (patch.firstName !== undefined) add('first_name', patch.firstName);
  if (patch.lastName !== undefined) add('last_name', patch.lastName);
  if (sets.length === 0) {
    const r = await q.query<ContactRow>(`SELECT ${CONTACT_COLUMNS} FROM contacts WHERE id = $1`, [id]);
    return r.rows[0] ? toContact(r.rows[0]) : null;
  }
  add('updated_at', new Date(nowMs));
  try {
    const r = await q.query<ContactRow>(`UPDATE contacts SET ${sets.join(', ')} WHERE id = $1 RETURNING ${CONTACT_COLUMNS}`, args);
    return r.rows[0] ? toContact(r.rows[0]) : null;
  } catch (err) {
    if ((err as { code?: string }).code === '23505') return 'duplicate';
    throw err;
  }
}

export async function deleteContact(q: Queryable, id: string): Promise<boolean> {
  const r = await q.query(`DELETE FROM contacts WHERE id = $1`, [id]);
  return (r.rowCount ?? 0) > 0;
}

/** Exact number of contacts, from the trigger-maintained shards (O(1), no table scan). */
export async function countContacts(q: Queryable): Promise<number> {
  const r = await q.query<{ n: string | number | null }>(`SELECT sum(n) AS n FROM contact_count_shards`);
  return Number(r.rows[0]?.n ?? 0);
}
