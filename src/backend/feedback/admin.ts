/**
 * Admin routes of the feedback area (Bearer ADMIN_TOKEN, the backend's shared guard): the
 * team inbox, the MTA's operational events, and the campaign-sending pause.
 */
import { Type } from '@sinclair/typebox';
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

const ListQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 25 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
);

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
function encodeCursor(at: Date, id: string): string {
  return Buffer.from(`${at.toISOString()}|${id}`).toString('base64url');
}
function decodeCursor(cursor: string | undefined): [string, string] | null {
  if (!cursor) return null;
  const [at, id] = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  if (!at || !id || !Number.isFinite(Date.parse(at))) throw badInput('Invalid cursor', 'invalid_cursor');
  return [at, id];
}

async function page(db: Db, table: string, timeCol: string, q: { limit?: number; cursor?: string }, where: string[], params: unknown[]) {
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
    `SELECT * FROM ${table} ${conds.length ? `WHERE ${conds.join(' AND ')}` : ''} ORDER BY ${timeCol} DESC, id DESC LIMIT $${args.length}`,
    args,
  );
  const rows = r.rows.slice(0, limit);
  const isDone = r.rows.length <= limit;
  const lastRow = rows[rows.length - 1];
  return { rows, pagination: { limit, cursor: isDone || !lastRow ? null : encodeCursor(lastRow[timeCol], lastRow.id), isDone } };
}

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

const inboxItem = (r: any, full: boolean) => ({
  id: r.id,
  messageId: r.message_id,
  from: r.from_address,
  to: r.to_addresses,
  subject: r.subject,
  inReplyTo: r.in_reply_to,
  receivedAt: iso(r.received_at),
  ...(full
    ? { text: r.text_body, html: r.html_body, references: r.refs, extra: r.extra }
    : { preview: (r.text_body ?? '').replace(/\s+/g, ' ').trim().slice(0, 200) }),
});

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

    scope.get('/admin/inbox', { schema: { querystring: ListQuery } }, async (req) => {
      const { rows, pagination } = await page(deps.db, 'feedback_inbox', 'received_at', req.query, [], []);
      return { data: rows.map((r) => inboxItem(r, false)), pagination };
    });

    scope.get('/admin/inbox/:id', { schema: { params: Type.Object({ id: Type.String({ maxLength: 100 }) }) } }, async (req) => {
      const r = await deps.db.query('SELECT * FROM feedback_inbox WHERE id = $1', [req.params.id]);
      if (!r.rows[0]) throw notFound('Inbox message not found', 'inbox_message_not_found');
      return { data: inboxItem(r.rows[0], true) };
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
