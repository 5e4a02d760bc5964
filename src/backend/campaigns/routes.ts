/**
 * Campaigns (admin API): POST /admin/campaigns creates a draft for a topic; POST
 * /admin/campaigns/:id/send snapshots the archive, counts the eligible members and starts
 * the durable fan-out (202). GET /admin/campaigns/:id shows progress.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { parseMailbox } from '../../shared/mail/address.js';
import type { AdminGuard } from '../api/admin-auth.js';
import { TRANSACTIONAL } from '../api/policy.js';
import { Readable } from 'node:stream';
import type { Fanout } from './fanout.js';
import { RECIPIENT_STATES, RECIPIENTS, SCHEDULE, type RecipientState } from './policy.js';
import { csvField, decodeCursor, recipientPage } from './recipients.js';
import { startCampaign, type CampaignRow } from './start.js';
import type { TransportResolver } from './transport.js';

const CreateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ maxLength: 200 })),
    subject: Type.String({ minLength: 1, maxLength: TRANSACTIONAL.maxSubjectLength }),
    html: Type.String({ minLength: 1, maxLength: TRANSACTIONAL.maxHtmlBytes }),
    text: Type.Optional(Type.String({ maxLength: TRANSACTIONAL.maxTextBytes })),
    previewText: Type.Optional(Type.String({ maxLength: 500 })),
    from: Type.String({ minLength: 3, maxLength: 512 }),
    topicId: Type.String({ minLength: 1, maxLength: 100 }),
  },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const ScheduleBody = Type.Object({ sendAt: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
// An instant, so with its offset: a bare local time would depend on the server's zone.
const ISO_INSTANT = /^(\d{4})-(\d{2})-(\d{2})T([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i;
/** Milliseconds of an ISO instant, or NaN; a day the month lacks (Date.parse rolls 02-30 over) is NaN too. */
function parseInstant(v: string): number {
  const m = ISO_INSTANT.exec(v);
  if (!m) return NaN;
  const day = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
  if (day.getUTCMonth() !== Number(m[2]) - 1 || day.getUTCDate() !== Number(m[3])) return NaN;
  return Date.parse(v);
}
const RecipientQuery = Type.Object(
  {
    status: Type.Optional(Type.Union(RECIPIENT_STATES.map((s) => Type.Literal(s)))),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    limit: Type.Integer({ minimum: 1, maximum: RECIPIENTS.maxLimit, default: RECIPIENTS.defaultLimit }),
  },
  { additionalProperties: false },
);
const Recipient = Type.Object({
  contactId: Type.Union([Type.String(), Type.Null()]),
  email: Type.String(),
  // Spelled out: a mapped array of literals types as never (policy RECIPIENT_STATES is the same list).
  status: Type.Union([Type.Literal('queued'), Type.Literal('sent'), Type.Literal('delivered'), Type.Literal('bounced'), Type.Literal('suppressed'), Type.Literal('failed')]),
  reason: Type.Union([Type.String(), Type.Null()]),
  smtpResponse: Type.Union([Type.String(), Type.Null()]),
  updatedAt: Type.String(),
});
const RecipientPage = Type.Object({
  data: Type.Array(Recipient),
  pagination: Type.Object({ limit: Type.Integer(), cursor: Type.Union([Type.String(), Type.Null()]), isDone: Type.Boolean() }),
});
const ExportQuery = Type.Object({ status: Type.Optional(Type.Union(RECIPIENT_STATES.map((s) => Type.Literal(s)))) }, { additionalProperties: false });

type Row = CampaignRow;

export interface CampaignRouteDeps {
  db: Db;
  clock: Clock;
  guard: AdminGuard;
  fanout: Fanout;
  transports: TransportResolver;
  baseUrl: string;
  organizationName: string;
}

export function campaignRoutes(app: HttpApp, d: CampaignRouteDeps): void {
  const admin = { onRequest: d.guard };
  const view = async (r: Row) => {
    // Progress from the campaign's email_sends rows: sending = in flight, failed = refused by
    // the provider, everything else was handed over (and has moved on with feedback since).
    const counts = (
      await d.db.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM email_sends WHERE campaign_id = $1 GROUP BY status', [r.id])
    ).rows;
    const by: Record<string, number> = Object.fromEntries(counts.map((c) => [c.status, c.n]));
    const total = counts.reduce((a, c) => a + c.n, 0);
    return {
      id: r.id,
      name: r.name,
      subject: r.subject,
      html: r.html,
      text: r.text_body,
      previewText: r.preview_text,
      from: r.from_mailbox,
      topicId: r.topic_id,
      status: r.status,
      archiveToken: r.archive_token,
      archiveUrl: r.archive_token ? `${d.baseUrl}/archive/${r.archive_token}` : null,
      recipients: r.recipients,
      progress: { handedOver: total - (by.sending ?? 0) - (by.failed ?? 0), inFlight: by.sending ?? 0, failed: by.failed ?? 0, byStatus: by },
      error: r.error,
      createdAt: toIso(r.created_at),
      updatedAt: toIso(r.updated_at),
      sendStartedAt: r.send_started_at ? toIso(r.send_started_at) : null,
      completedAt: r.completed_at ? toIso(r.completed_at) : null,
      scheduledAt: r.scheduled_at ? toIso(r.scheduled_at) : null,
    };
  };

  app.post('/admin/campaigns', { ...admin, schema: { body: CreateBody } }, async (req, reply) => {
    const b = req.body as Static<typeof CreateBody>;
    const from = parseMailbox(b.from);
    if (!from) throw badInput('from must be an address or "Name <address>"', 'validation_error');
    const topic = await d.db.query('SELECT 1 FROM topics WHERE id = $1', [b.topicId]);
    if (topic.rowCount === 0) throw badInput(`Unknown topic: ${b.topicId}`, 'validation_error');
    const now = d.clock.now();
    const r = await d.db.query<Row>(
      `INSERT INTO campaigns (id, name, subject, html, text_body, preview_text, from_mailbox, topic_id, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'draft', $9, $9) RETURNING *`,
      [newId('cmp', now), b.name ?? null, b.subject, b.html, b.text ?? null, b.previewText ?? '', b.from.trim(), b.topicId, toIso(now)],
    );
    return reply.code(201).send({ data: await view(r.rows[0]!) });
  });

  app.get('/admin/campaigns', admin, async () => {
    const r = await d.db.query<Row>('SELECT * FROM campaigns ORDER BY id DESC LIMIT 500');
    return { data: await Promise.all(r.rows.map(view)) };
  });

  app.get('/admin/campaigns/:id', { ...admin, schema: { params: IdParams } }, async (req) => {
    const r = await d.db.query<Row>('SELECT * FROM campaigns WHERE id = $1', [(req.params as Static<typeof IdParams>).id]);
    if (!r.rows[0]) throw notFound('Campaign not found', 'campaign_not_found');
    return { data: await view(r.rows[0]) };
  });

  app.post('/admin/campaigns/:id/send', { ...admin, schema: { params: IdParams } }, async (req, reply) => {
    const started = (await startCampaign(d, (req.params as Static<typeof IdParams>).id))!;
    return reply.code(202).send({ data: { id: started.id, status: started.status, archiveToken: started.archive_token, recipients: started.recipients } });
  });

  const exists = async (id: string) => {
    if ((await d.db.query('SELECT 1 FROM campaigns WHERE id = $1', [id])).rowCount === 0) throw notFound('Campaign not found', 'campaign_not_found');
  };
  const statusOf = async (id: string) => {
    const r = await d.db.query<{ status: string }>('SELECT status FROM campaigns WHERE id = $1', [id]);
    if (!r.rows[0]) throw notFound('Campaign not found', 'campaign_not_found');
    return r.rows[0].status;
  };

  // Schedule for later: the sweep (./schedule.ts) starts it through the same path as send now.
  app.post('/admin/campaigns/:id/schedule', { ...admin, schema: { params: IdParams, body: ScheduleBody } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const { sendAt } = req.body as Static<typeof ScheduleBody>;
    const at = parseInstant(sendAt);
    if (Number.isNaN(at)) throw badInput('sendAt must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z', 'validation_error');
    const now = d.clock.now();
    if (at <= now) throw badInput('sendAt must be in the future', 'validation_error');
    if (at > now + SCHEDULE.maxAheadMs) throw badInput(`sendAt must be at most ${Math.round(SCHEDULE.maxAheadMs / 86_400_000)} days ahead`, 'validation_error');
    const r = await d.db.query<Row>(
      `UPDATE campaigns SET status = 'scheduled', scheduled_at = $2, updated_at = $3 WHERE id = $1 AND status IN ('draft', 'scheduled') RETURNING *`,
      [id, toIso(at), toIso(now)],
    );
    if (!r.rows[0]) throw conflict(`Only a draft or scheduled campaign can be scheduled (status ${await statusOf(id)})`, 'campaign_not_schedulable');
    return { data: await view(r.rows[0]) };
  });

  app.delete('/admin/campaigns/:id/schedule', { ...admin, schema: { params: IdParams } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const r = await d.db.query<Row>(
      `UPDATE campaigns SET status = 'draft', scheduled_at = NULL, updated_at = $2 WHERE id = $1 AND status = 'scheduled' RETURNING *`,
      [id, toIso(d.clock.now())],
    );
    if (!r.rows[0]) throw conflict(`This campaign is not scheduled (status ${await statusOf(id)})`, 'campaign_not_scheduled');
    return { data: await view(r.rows[0]) };
  });

  // The per-recipient record (docs/dashboard.md): latest send per recipient, filterable by state.
  app.get('/admin/campaigns/:id/recipients', { ...admin, schema: { params: IdParams, querystring: RecipientQuery, response: { 200: RecipientPage } } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const q = req.query as Static<typeof RecipientQuery>;
    await exists(id);
    const limit = q.limit ?? RECIPIENTS.defaultLimit;
    const page = await recipientPage(d.db, id, { status: q.status as RecipientState | undefined, after: decodeCursor(q.cursor), limit });
    return { data: page.rows, pagination: { limit, cursor: page.next, isDone: page.next === null } };
  });

  app.get('/admin/campaigns/:id/recipients.csv', { ...admin, schema: { params: IdParams, querystring: ExportQuery } }, async (req, reply) => {
    const { id } = req.params as Static<typeof IdParams>;
    const status = (req.query as Static<typeof ExportQuery>).status as RecipientState | undefined;
    await exists(id);
    const db = d.db;
    // Streamed page by page: memory stays one page whatever the campaign's size.
    async function* lines(): AsyncGenerator<string> {
      yield 'contact_id,email,status,reason,smtp_response,updated_at\r\n';
      let after = '';
      for (;;) {
        const page = await recipientPage(db, id, { status, after, limit: RECIPIENTS.exportPage });
        yield page.rows.map((r) => [r.contactId, r.email, r.status, r.reason, r.smtpResponse, r.updatedAt].map(csvField).join(',') + '\r\n').join('');
        if (!page.next) return;
        after = decodeCursor(page.next);
      }
    }
    reply.header('content-type', 'text/csv; charset=utf-8').header('content-disposition', `attachment; filename="${id}-recipients.csv"`);
    return reply.send(Readable.from(lines()));
  });

  // Resends only the failures (policy RECIPIENTS.retryStatuses and soft bounces); idempotent.
  app.post('/admin/campaigns/:id/retry', { ...admin, schema: { params: IdParams, response: { 202: Type.Object({ data: Type.Object({ queued: Type.Integer() }) }) } } }, async (req, reply) => {
    const { id } = req.params as Static<typeof IdParams>;
    const queued = await d.fanout.retry(id);
    return reply.code(202).send({ data: { queued } });
  });
}
