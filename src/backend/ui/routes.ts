/**
 * Read-only admin routes the dashboard needs and the admin API lacked: the overview's daily
 * aggregates, contacts for an operator (the /api/v1 list takes API keys, not the admin
 * credential), a contact's activity, and the transactional log. Each list is keyset-paged.
 */
import { Type, type Static } from '@sinclair/typebox';
import { toIso, type Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import type { Db } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Signer } from '../../shared/signing.js';
import type { AdminGuard } from '../api/admin-auth.js';
import { findContact } from '../api/contacts.js';
import { listContacts } from '../api/contact-list.js';
import { CONTACT_LIST } from '../api/policy.js';
import { DASHBOARD_LIMITS } from './policy.js';

export interface DashboardRouteDeps {
  db: Db;
  clock: Clock;
  guard: AdminGuard;
  signer: () => Promise<Signer>;
}

const StatsQuery = Type.Object(
  { days: Type.Integer({ minimum: 1, maximum: DASHBOARD_LIMITS.maxStatsDays, default: DASHBOARD_LIMITS.defaultStatsDays }) },
  { additionalProperties: false },
);
const ContactsQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: CONTACT_LIST.maxLimit, default: CONTACT_LIST.defaultLimit }),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
    search: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: false },
);
const PageQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: DASHBOARD_LIMITS.maxPage, default: DASHBOARD_LIMITS.defaultPage }),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  },
  { additionalProperties: false },
);
const SendsQuery = Type.Object(
  {
    limit: Type.Integer({ minimum: 1, maximum: DASHBOARD_LIMITS.maxPage, default: DASHBOARD_LIMITS.defaultPage }),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    recipient: Type.Optional(Type.String({ maxLength: 320 })),
    messageId: Type.Optional(Type.String({ maxLength: 998 })),
  },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 320 }) });

/** Keyset cursors here are the last row's id, which is opaque enough for ordering-only use. */
const page = <T extends { id: string }>(rows: T[], limit: number) => {
  const more = rows.length > limit;
  const data = more ? rows.slice(0, limit) : rows;
  return { data, pagination: { limit, cursor: more ? data[data.length - 1]!.id : null, isDone: !more } };
};

export function dashboardRoutes(app: HttpApp, d: DashboardRouteDeps): void {
  const admin = { onRequest: d.guard };

  /**
   * Per UTC day: messages created (sends) and, of those, how many are now delivered,
   * bounced, complained; first human opens and clicks by the day they happened. Rates are
   * over the window's sends. Days with nothing are present with zeros (a gap is a zero).
   */
  app.get('/admin/dashboard/stats', { ...admin, schema: { querystring: StatsQuery } }, async (req) => {
    const { days } = req.query as Static<typeof StatsQuery>;
    const end = Math.floor(d.clock.now() / 86_400_000) * 86_400_000 + 86_400_000;
    const start = end - days * 86_400_000;
    const [sends, engagement] = await Promise.all([
      d.db.query<{ day: string; sends: number; delivered: number; bounced: number; complained: number }>(
        `SELECT to_char(date_trunc('day', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS day,
                count(*)::int AS sends,
                count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
                count(*) FILTER (WHERE status = 'bounced')::int AS bounced,
                count(*) FILTER (WHERE status = 'complained')::int AS complained
           FROM email_sends WHERE created_at >= $1 AND created_at < $2 GROUP BY 1`,
        [toIso(start), toIso(end)],
      ),
      d.db.query<{ day: string; opens: number; clicks: number }>(
        `SELECT day, sum(opens)::int AS opens, sum(clicks)::int AS clicks FROM (
           SELECT to_char(date_trunc('day', first_human_open_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS day, 1 AS opens, 0 AS clicks
             FROM email_engagement WHERE first_human_open_at >= $1 AND first_human_open_at < $2
           UNION ALL
           SELECT to_char(date_trunc('day', first_human_click_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD'), 0, 1
             FROM email_engagement WHERE first_human_click_at >= $1 AND first_human_click_at < $2) e GROUP BY day`,
        [toIso(start), toIso(end)],
      ),
    ]);
    const byDay = new Map(sends.rows.map((r) => [r.day, r]));
    const engByDay = new Map(engagement.rows.map((r) => [r.day, r]));
    const series: { day: string; sends: number; delivered: number; bounced: number; complained: number; opens: number; clicks: number }[] = [];
    for (let t = start; t < end; t += 86_400_000) {
      const day = toIso(t).slice(0, 10);
      const s = byDay.get(day);
      const e = engByDay.get(day);
      series.push({
        day,
        sends: s?.sends ?? 0,
        delivered: s?.delivered ?? 0,
        bounced: s?.bounced ?? 0,
        complained: s?.complained ?? 0,
        opens: e?.opens ?? 0,
        clicks: e?.clicks ?? 0,
      });
    }
    const total = (k: 'sends' | 'bounced' | 'complained') => series.reduce((a, r) => a + r[k], 0);
    const sent = total('sends');
    return {
      data: {
        days: series,
        totals: { sends: sent, bounced: total('bounced'), complained: total('complained') },
        rates: { bounce: sent ? total('bounced') / sent : 0, complaint: sent ? total('complained') / sent : 0 },
        thresholds: DASHBOARD_LIMITS.dangerRates,
      },
    };
  });

  app.get('/admin/dashboard/contacts', { ...admin, schema: { querystring: ContactsQuery } }, async (req) => {
    const q = req.query as Static<typeof ContactsQuery>;
    return listContacts(d.db, await d.signer(), q, d.clock.now());
  });

  /** One contact with its topic memberships; its activity is paged separately. */
  app.get('/admin/dashboard/contacts/:id', { ...admin, schema: { params: IdParams } }, async (req) => {
    const contact = await findContact(d.db, (req.params as Static<typeof IdParams>).id);
    if (!contact) throw notFound('Contact not found', 'contact_not_found');
    const topics = await d.db.query<{ topic_id: string; name: string; doi_status: string; unsubscribed_at: Date | null; created_at: Date }>(
      `SELECT m.topic_id, t.name, m.doi_status, m.unsubscribed_at, m.created_at FROM topic_memberships m JOIN topics t ON t.id = m.topic_id
        WHERE m.contact_id = $1 ORDER BY t.name LIMIT $2`,
      [contact.id, DASHBOARD_LIMITS.maxPage],
    );
    return {
      data: {
        ...contact,
        topics: topics.rows.map((r) => ({
          topicId: r.topic_id,
          name: r.name,
          doiStatus: r.doi_status,
          subscribed: r.unsubscribed_at === null,
          since: toIso(r.created_at),
        })),
      },
    };
  });

  /** Newest first: delivery feedback, opens, clicks, unsubscribes (contact_activity). */
  app.get('/admin/dashboard/contacts/:id/activity', { ...admin, schema: { params: IdParams, querystring: PageQuery } }, async (req) => {
    const contact = await findContact(d.db, (req.params as Static<typeof IdParams>).id);
    if (!contact) throw notFound('Contact not found', 'contact_not_found');
    const q = req.query as Static<typeof PageQuery>;
    const r = await d.db.query<{ id: string; type: string; send_id: string | null; source: string; detail: unknown; occurred_at: Date }>(
      `SELECT id, type, send_id, source, detail, occurred_at FROM contact_activity
        WHERE (contact_id = $1 OR email = $2) AND ($3::text IS NULL OR id < $3) ORDER BY id DESC LIMIT $4`,
      [contact.id, contact.email, q.cursor ?? null, q.limit + 1],
    );
    return page(
      r.rows.map((a) => ({ id: a.id, type: a.type, sendId: a.send_id, source: a.source, detail: a.detail, occurredAt: toIso(a.occurred_at) })),
      q.limit,
    );
  });

  /**
   * A campaign's engagement: opens and clicks (human, first per message) over its sends, and
   * clicks per link (human clicks, distinct recipients; machine clicks counted apart).
   */
  app.get('/admin/dashboard/campaigns/:id/engagement', { ...admin, schema: { params: IdParams } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const [totals, links] = await Promise.all([
      d.db.query<{ sends: number; opened: number; clicked: number }>(
        `SELECT (SELECT count(*)::int FROM email_sends WHERE campaign_id = $1) AS sends,
                count(*) FILTER (WHERE first_human_open_at IS NOT NULL)::int AS opened,
                count(*) FILTER (WHERE first_human_click_at IS NOT NULL)::int AS clicked
           FROM email_engagement WHERE campaign_id = $1`,
        [id],
      ),
      d.db.query<{ url: string; clicks: number; recipients: number; machine: number }>(
        `SELECT c.url, count(*) FILTER (WHERE NOT c.machine)::int AS clicks,
                count(DISTINCT c.email_send_id) FILTER (WHERE NOT c.machine)::int AS recipients,
                count(*) FILTER (WHERE c.machine)::int AS machine
           FROM email_clicks c JOIN email_sends s ON s.id = c.email_send_id
          WHERE s.campaign_id = $1 GROUP BY c.url ORDER BY 2 DESC, 1 LIMIT $2`,
        [id, DASHBOARD_LIMITS.maxPage],
      ),
    ]);
    const t = totals.rows[0]!;
    return {
      data: {
        sends: t.sends,
        opened: t.opened,
        clicked: t.clicked,
        openRate: t.sends ? t.opened / t.sends : 0,
        clickRate: t.sends ? t.clicked / t.sends : 0,
        links: links.rows,
      },
    };
  });

  /** The transactional log: newest first, by exact recipient or Message-ID. */
  app.get('/admin/dashboard/sends', { ...admin, schema: { querystring: SendsQuery } }, async (req) => {
    const q = req.query as Static<typeof SendsQuery>;
    const recipient = q.recipient?.trim().toLowerCase() || null;
    const messageId = q.messageId?.trim().replace(/^<|>$/g, '') || null;
    const r = await d.db.query<SendRow>(
      `SELECT ${SEND_COLUMNS} FROM email_sends
        WHERE type = 'transactional' AND ($1::text IS NULL OR lower(to_email) = $1)
          AND ($2::text IS NULL OR message_id IN ($2, '<' || $2 || '>') OR provider_message_id = $2)
          AND ($3::text IS NULL OR id < $3)
        ORDER BY id DESC LIMIT $4`,
      [recipient, messageId, q.cursor ?? null, q.limit + 1],
    );
    return page(r.rows.map(toSend), q.limit);
  });

  /** One send and its event timeline (feedback events and contact activity, oldest first). */
  app.get('/admin/dashboard/sends/:id', { ...admin, schema: { params: IdParams } }, async (req) => {
    const { id } = req.params as Static<typeof IdParams>;
    const r = await d.db.query<SendRow>(`SELECT ${SEND_COLUMNS} FROM email_sends WHERE id = $1`, [id]);
    if (!r.rows[0]) throw notFound('Send not found', 'send_not_found');
    const send = r.rows[0];
    const events = await d.db.query<{ type: string; source: string; detail: unknown; at: Date }>(
      `SELECT type, source, detail, occurred_at AS at FROM feedback_events
        WHERE send_id = $1 OR ($2::text IS NOT NULL AND provider_message_id = $2)
       UNION ALL
       SELECT type, source, detail, occurred_at FROM contact_activity WHERE send_id = $1
       ORDER BY at LIMIT $3`,
      [id, send.provider_message_id, DASHBOARD_LIMITS.maxTimeline],
    );
    return {
      data: {
        ...toSend(send),
        timeline: [
          { type: 'created', source: 'lettermill', detail: {}, at: toIso(send.created_at) },
          ...events.rows.map((e) => ({ type: e.type, source: e.source, detail: e.detail, at: toIso(e.at) })),
        ],
      },
    };
  });

}

const SEND_COLUMNS = 'id, to_email, from_email, subject, message_id, provider, provider_message_id, status, error, created_at, updated_at';
interface SendRow {
  id: string;
  to_email: string;
  from_email: string;
  subject: string;
  message_id: string | null;
  provider: string;
  provider_message_id: string | null;
  status: string;
  error: string | null;
  created_at: Date;
  updated_at: Date;
}
const toSend = (r: SendRow) => ({
  id: r.id,
  to: r.to_email,
  from: r.from_email,
  subject: r.subject,
  messageId: r.message_id,
  provider: r.provider,
  providerMessageId: r.provider_message_id,
  status: r.status,
  error: r.error,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

/** What the settings screen shows of this server's configuration (never a secret). */
export function settingsRoute(app: HttpApp, d: { guard: AdminGuard; config: Pick<Config, 'ORGANIZATION_NAME' | 'BASE_URL' | 'EMAIL_PROVIDER' | 'MTA_URL'> }): void {
  app.get('/admin/dashboard/settings', { onRequest: d.guard }, async () => ({
    data: {
      organizationName: d.config.ORGANIZATION_NAME,
      baseUrl: d.config.BASE_URL ?? null,
      emailProvider: d.config.EMAIL_PROVIDER ?? null,
      mtaConfigured: Boolean(d.config.MTA_URL),
    },
  }));
}
