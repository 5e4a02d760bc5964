/**
 * Admin routes of the feedback area (Bearer ADMIN_TOKEN, the backend's shared guard): the
 * team inbox, the MTA's operational events, and the campaign-sending pause.
 */
import { Type, type Static } from '@sinclair/typebox';
import { simpleParser } from 'mailparser';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import type { Db } from '../../shared/db/pool.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Logger } from '../../shared/log.js';
import { adminGuard } from '../api/admin-auth.js';
import { MTA_OPERATIONAL_EVENTS } from './lifecycle.js';
import { resumeCampaignSending, sendingStatus } from './sending-pause.js';

export interface AdminDeps {
  config: Pick<Config, 'ADMIN_TOKEN'>;
  db: Db;
  clock: Clock;
  log: Logger;
}

const MtaEventsQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 25 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
    event: Type.Optional(Type.Union(MTA_OPERATIONAL_EVENTS.map((e) => Type.Literal(e)))),
  },
  { additionalProperties: false },
);

const ResumeBody = Type.Union([
  Type.Object({ note: Type.Optional(Type.String({ maxLength: 1000 })) }, { additionalProperties: false }),
  Type.Null(),
]);

/** Keyset cursor over (time DESC, id DESC): stable while rows are added. */
export function encodeCursor(at: Date, id: string): string {
  return Buffer.from(`${at.toISOString()}|${id}`).toString('base64url');
}
function decodeCursor(cursor: string | undefined): [string, string] | null {
  if (!cursor) return null;
  const [at, id] = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  if (!at || !id || !Number.isFinite(Date.parse(at))) throw badInput('Invalid cursor', 'invalid_cursor');
  return [at, id];
}

export async function page(db: Db, table: string, timeCol: string, q: { limit?: number; cursor?: string }, where: string[], params: unknown[], columns = '*') {
  const limit = q.limit ?? 25;
  const after = decodeCursor(q.cursor);
  const conds = [...where];
  const args = [...params];
  if (after) {
    args.push(after[0], after[1]);
    conds.push(`(${timeCol}, id) < ($${args.length - 1}::timestamptz, $${args.length})`);
  }
  args.push(limit + 1);
  const r = await db.query(
    `SELECT ${columns} FROM ${table} ${conds.length ? `WHERE ${conds.join(' AND ')}` : ''} ORDER BY ${timeCol} DESC, id DESC LIMIT $${args.length}`,
    args,
  );
  const rows = r.rows.slice(0, limit);
  const isDone = r.rows.length <= limit;
  const lastRow = rows[rows.length - 1];
  return { rows, pagination: { limit, cursor: isDone || !lastRow ? null : encodeCursor(lastRow[timeCol], lastRow.id), isDone } };
}

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

const InboxQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 25 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
    from: Type.Optional(Type.String({ minLength: 1, maxLength: 254, description: 'Part of the From header (case-insensitive)' })),
    to: Type.Optional(Type.String({ minLength: 3, maxLength: 254, description: 'One of the recipient addresses' })),
    q: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Part of the subject (case-insensitive)' })),
    contactId: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    campaignId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    sendId: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    linked: Type.Optional(Type.Boolean({ description: 'true: replies linked to one of our sends; false: the others' })),
    since: Type.Optional(Type.String({ format: 'date-time' })),
    until: Type.Optional(Type.String({ format: 'date-time' })),
  },
  { additionalProperties: false },
);
type InboxFilters = Static<typeof InboxQuery>;

/** `%` and `_` taken literally in ILIKE. */
const likeEscaped = (s: string) => `%${s.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/** The WHERE conditions of the inbox filters, with their parameters. */
function inboxWhere(q: InboxFilters): { where: string[]; params: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (cond: (n: string) => string, value: unknown) => {
    params.push(value);
    where.push(cond(`$${params.length}`));
  };
  if (q.from !== undefined) add((n) => `from_address ILIKE ${n}`, likeEscaped(q.from));
  if (q.to !== undefined) add((n) => `${n} = ANY (to_addresses)`, q.to.trim().toLowerCase());
  if (q.q !== undefined) add((n) => `subject ILIKE ${n}`, likeEscaped(q.q));
  if (q.contactId !== undefined) add((n) => `contact_id = ${n}`, q.contactId);
  if (q.campaignId !== undefined) add((n) => `campaign_id = ${n}`, q.campaignId);
  if (q.sendId !== undefined) add((n) => `send_id = ${n}`, q.sendId);
  if (q.linked !== undefined) where.push(q.linked ? 'send_id IS NOT NULL' : 'send_id IS NULL');
  if (q.since !== undefined) add((n) => `received_at >= ${n}::timestamptz`, q.since);
  if (q.until !== undefined) add((n) => `received_at < ${n}::timestamptz`, q.until);
  return { where, params };
}

/** Listing columns: no raw bytes, bodies cut to what the preview needs. */
const INBOX_LIST_COLUMNS = `id, message_id, from_address, to_addresses, subject, in_reply_to, received_at, left(text_body, 1000) AS text_body,
  send_id, contact_id, campaign_id, linked_by, authentication, raw_size, jsonb_array_length(attachments) AS attachment_count`;
const INBOX_COLUMNS = `id, message_id, from_address, to_addresses, subject, in_reply_to, received_at, text_body, html_body, refs, extra,
  send_id, contact_id, campaign_id, linked_by, authentication, raw_size, attachments, route, raw IS NOT NULL AS has_raw`;

const links = (r: any) => ({ sendId: r.send_id, contactId: r.contact_id, campaignId: r.campaign_id, linkedBy: r.linked_by });

const inboxItem = (r: any, full: boolean) => ({
  id: r.id,
  messageId: r.message_id,
  from: r.from_address,
  to: r.to_addresses,
  subject: r.subject,
  inReplyTo: r.in_reply_to,
  receivedAt: iso(r.received_at),
  links: links(r),
  rawSize: r.raw_size === null ? null : Number(r.raw_size),
  ...(full
    ? {
        text: r.text_body,
        html: r.html_body,
        references: r.refs,
        route: r.route,
        authentication: r.authentication,
        attachments: (r.attachments as any[]).map((a, index) => ({ index, ...a, url: `/admin/inbox/${r.id}/attachments/${index}` })),
        rawUrl: r.has_raw ? `/admin/inbox/${r.id}/raw` : null,
        extra: r.extra,
      }
    : {
        preview: (r.text_body ?? '').replace(/\s+/g, ' ').trim().slice(0, 200),
        authentication: r.authentication ? { spf: r.authentication.spf, dkim: r.authentication.dkim, dmarc: r.authentication.dmarc } : null,
        attachmentCount: r.attachment_count,
      }),
});

/** The stored message as received; 404 when the message or its bytes are not kept. */
async function inboxRaw(db: Db, id: string): Promise<Buffer> {
  const r = await db.query<{ raw: Buffer | null }>('SELECT raw FROM feedback_inbox WHERE id = $1', [id]);
  if (!r.rows[0]) throw notFound('Inbox message not found', 'inbox_message_not_found');
  if (!r.rows[0].raw) throw notFound('This message was stored without its raw bytes (sent by an MTA older than inbound routing)', 'raw_not_kept');
  return r.rows[0].raw;
}

type Described = { filename?: string | null; contentType?: string; size?: number; contentId?: string | null };

/**
 * The parsed attachment the `index`th description names. The MTA's parser may order parts
 * differently (inline parts of multipart/related first, or not): matched by Content-ID, then
 * filename and size, then filename; by position only when the MTA described none.
 */
export function pickAttachment<A extends { filename?: string; size: number; contentId?: string; contentType: string }>(parsed: A[], described: Described[], index: number): A | undefined {
  if (described.length === 0) return parsed[index];
  const d = described[index];
  if (!d) return undefined;
  const bare = (cid: string | null | undefined) => (cid ? cid.replace(/^<|>$/g, '').toLowerCase() : null);
  const cid = bare(d.contentId);
  return (
    (cid ? parsed.find((a) => bare(a.contentId) === cid) : undefined) ??
    parsed.find((a) => d.filename != null && a.filename === d.filename && a.size === d.size) ??
    parsed.find((a) => d.filename != null && a.filename === d.filename) ??
    (parsed.length === described.length ? parsed[index] : undefined)
  );
}

/** `filename*` (RFC 6266/8187) with an ASCII fallback, so any name is safe in the header. */
export function attachmentDisposition(name: string | null | undefined, fallback: string): string {
  const n = (name ?? '').replace(/[\r\n"\\]/g, '').trim() || fallback;
  const ascii = n.replace(/[^\x20-\x7e]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(n)}`;
}

const mtaEventItem = (r: any) => ({
  id: r.id,
  event: r.event,
  severity: r.severity,
  organizationId: r.organization_id,
  ip: r.ip,
  data: r.data,
  occurredAt: iso(r.occurred_at),
  receivedAt: iso(r.received_at),
});

export function feedbackAdminRoutes(app: HttpApp, deps: AdminDeps): void {
  app.register(async (plain) => {
    const scope = plain.withTypeProvider<TypeBoxTypeProvider>();
    scope.addHook('onRequest', adminGuard(deps));

    scope.get('/admin/inbox', { schema: { querystring: InboxQuery } }, async (req) => {
      const { where, params } = inboxWhere(req.query);
      const { rows, pagination } = await page(deps.db, 'feedback_inbox', 'received_at', req.query, where, params, INBOX_LIST_COLUMNS);
      return { data: rows.map((r) => inboxItem(r, false)), pagination };
    });

    const IdParams = Type.Object({ id: Type.String({ maxLength: 100 }) });
    scope.get('/admin/inbox/:id', { schema: { params: IdParams } }, async (req) => {
      const r = await deps.db.query(`SELECT ${INBOX_COLUMNS} FROM feedback_inbox WHERE id = $1`, [req.params.id]);
      if (!r.rows[0]) throw notFound('Inbox message not found', 'inbox_message_not_found');
      return { data: inboxItem(r.rows[0], true) };
    });

    scope.get('/admin/inbox/:id/raw', { schema: { params: IdParams } }, async (req, reply) => {
      const raw = await inboxRaw(deps.db, req.params.id);
      return reply
        .header('content-type', 'message/rfc822')
        .header('content-disposition', attachmentDisposition(`${req.params.id}.eml`, 'message.eml'))
        .header('x-content-type-options', 'nosniff')
        .send(raw);
    });

    // The bytes of one attachment of the detail's list (the MTA's descriptions, in its
    // order), parsed from the stored message with mailparser: nothing is stored twice.
    const AttachmentParams = Type.Object({ id: Type.String({ maxLength: 100 }), index: Type.Integer({ minimum: 0, maximum: 999 }) });
    scope.get('/admin/inbox/:id/attachments/:index', { schema: { params: AttachmentParams } }, async (req, reply) => {
      const raw = await inboxRaw(deps.db, req.params.id);
      const described = (await deps.db.query<{ attachments: Described[] }>('SELECT attachments FROM feedback_inbox WHERE id = $1', [req.params.id])).rows[0]?.attachments ?? [];
      // A message the parser cannot read still has its raw bytes (`/raw`); only this view fails.
      const parsed = await simpleParser(raw, { skipHtmlToText: true, skipTextToHtml: true, skipImageLinks: true }).catch(() => null);
      if (!parsed) throw notFound('The stored message cannot be parsed; its raw bytes are at /raw', 'attachment_not_found');
      const a = pickAttachment(parsed.attachments, described, req.params.index);
      if (!a) throw notFound(`This message has no attachment ${req.params.index}`, 'attachment_not_found');
      return reply
        .header('content-type', a.contentType || 'application/octet-stream')
        .header('content-disposition', attachmentDisposition(a.filename, `attachment-${req.params.index}`))
        .header('x-content-type-options', 'nosniff')
        .send(a.content);
    });

    scope.get('/admin/mta-events', { schema: { querystring: MtaEventsQuery } }, async (req) => {
      const where = req.query.event ? ['event = $1'] : [];
      const params = req.query.event ? [req.query.event] : [];
      const { rows, pagination } = await page(deps.db, 'feedback_mta_events', 'received_at', req.query, where, params);
      return { data: rows.map(mtaEventItem), pagination };
    });

    scope.get('/admin/sending-status', async () => ({ data: await sendingStatus(deps.db) }));

    scope.post('/admin/sending/resume', { schema: { body: Type.Optional(ResumeBody) } }, async (req) => {
      const note = (req.body as { note?: string } | null | undefined)?.note ?? null;
      const resumed = await resumeCampaignSending(deps.db, deps.clock, note);
      if (resumed.length) deps.log.warn({ pauses: resumed.map((p) => p.id), note }, 'campaign sending resumed by an operator');
      return { data: { ...(await sendingStatus(deps.db)), resumed } };
    });
  });
}
