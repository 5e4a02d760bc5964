/**
 * Personal mailboxes (docs/inbound.md, "Personal mailboxes (backend)"): a mailbox is an
 * address of the organization with an optional quota; the MTA delivers its mail through
 * `POST /webhooks/mta-mailbox`, stored here once per delivery id and counted in `used_bytes`.
 */
import { simpleParser } from 'mailparser';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { MtaMailboxDeliverySchema, type MtaMailboxDelivery, type MtaMailboxDeliveryResult } from '../../shared/contracts/mta.js';
import { timeMs, toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type Db } from '../../shared/db/pool.js';
import { badInput, notFound } from '../../shared/errors.js';
import { findInputFault, textFault } from '../../shared/input.js';

export interface MailboxRow {
  id: string;
  organization_id: string;
  address: string;
  quota_bytes: string | null;
  used_bytes: string;
  created_at: Date;
}

export const mailboxOut = (r: MailboxRow) => ({
  id: r.id,
  organizationId: r.organization_id,
  address: r.address,
  quotaBytes: r.quota_bytes === null ? null : Number(r.quota_bytes),
  usedBytes: Number(r.used_bytes),
  createdAt: toIso(r.created_at),
});

const deliveryCheck = TypeCompiler.Compile(MtaMailboxDeliverySchema);

/** The delivery's JSON, checked against the contract; a strict base64 `raw` decoded. */
export function parseDelivery(body: Buffer): { delivery: MtaMailboxDelivery; raw: Buffer } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw badInput('The body must be JSON', 'invalid_json');
  }
  // The input policy of every door (src/shared/input.ts): text PostgreSQL cannot store is a 400, not the INSERT's 500.
  const fault = findInputFault(parsed, 'body');
  if (fault) throw badInput(fault.message, fault.reason);
  if (!deliveryCheck.Check(parsed)) {
    const e = deliveryCheck.Errors(parsed).First();
    throw badInput(`Mailbox delivery: ${e ? `${e.path} ${e.message}`.trim() : 'invalid'}`, 'invalid_payload');
  }
  const d = parsed as MtaMailboxDelivery;
  if (d.raw.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(d.raw)) throw badInput('raw must be base64', 'invalid_payload');
  return { delivery: d, raw: Buffer.from(d.raw, 'base64') };
}

/** From and Subject for listings, from the header block alone (bounded: the body is never parsed here). */
async function headline(raw: Buffer): Promise<{ from: string | null; subject: string | null }> {
  // The first blank line, CRLF or bare LF (some senders' mail arrives with bare LFs).
  const ends = [raw.indexOf('\r\n\r\n'), raw.indexOf('\n\n')].filter((i) => i >= 0);
  const head = raw.subarray(0, Math.min(ends.length ? Math.min(...ends) : raw.length, 256 * 1024));
  try {
    const p = await simpleParser(Buffer.concat([head, Buffer.from('\r\n\r\n')]), { skipHtmlToText: true, skipTextToHtml: true, skipImageLinks: true });
    // Listing fields only: one PostgreSQL cannot store (a NUL in the header) is left out, the raw message keeps it.
    const storable = (t: string | undefined) => (t !== undefined && textFault(t) === null ? t : null);
    return { from: storable(p.from?.text?.slice(0, 1000)), subject: storable(p.subject?.slice(0, 998)) };
  } catch {
    return { from: null, subject: null };
  }
}

/**
 * Stores a delivery in its mailbox, once: a retried delivery id stores nothing and answers
 * `duplicate`. The bytes kept count toward the mailbox's usage in the same transaction. A
 * mailbox over its quota still takes what the MTA already accepted (the MTA refuses the
 * next message at RCPT with the `usedBytes` answered here).
 */
export async function storeDelivery(db: Db, nowMs: number, d: MtaMailboxDelivery, raw: Buffer): Promise<MtaMailboxDeliveryResult['data']> {
  const { from, subject } = await headline(raw);
  return tx(db, async (c) => {
    const mb = await c.query<{ used_bytes: string }>('SELECT used_bytes FROM mailboxes WHERE id = $1 AND organization_id = $2 FOR UPDATE', [d.mailboxId, d.organizationId]);
    if (!mb.rows[0]) throw notFound(`No mailbox ${d.mailboxId} in organization ${d.organizationId}`, 'mailbox_not_found');
    const ins = await c.query(
      `INSERT INTO mailbox_messages (id, mailbox_id, delivery_id, address, envelope_from, from_header, subject, authentication, raw, raw_size, received_at, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (delivery_id) DO NOTHING RETURNING id`,
      [newId('mbm', nowMs), d.mailboxId, d.id, d.address.toLowerCase(), d.envelopeFrom, from, subject, JSON.stringify(d.authentication), raw, d.rawSize, toIso(timeMs(d.receivedAt, nowMs)), toIso(nowMs)],
    );
    if (ins.rowCount === 0) return { stored: false, duplicate: true, usedBytes: Number(mb.rows[0].used_bytes) };
    const up = await c.query<{ used_bytes: string }>('UPDATE mailboxes SET used_bytes = used_bytes + $2 WHERE id = $1 RETURNING used_bytes', [d.mailboxId, raw.length]);
    return { stored: true, duplicate: false, usedBytes: Number(up.rows[0]!.used_bytes) };
  });
}
