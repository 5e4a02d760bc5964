/**
 * Topics: membership through /api/v1 (topics:write) and topic records through the admin API.
 *
 * Adding: a topic with requireDoubleOptIn makes the membership `pending` and sends a
 * confirmation email through the sending provider (refused with 503 before anything is
 * written when no provider is configured); otherwise `not_required`. Adding an active
 * member again changes nothing and answers its current status (a pending member gets the
 * confirmation again at most every DOUBLE_OPT_IN.resendAfterMs). Adding a member who had
 * been removed subscribes them again (pending again under double opt-in).
 * Removing sets unsubscribed_at (the row stays as the consent record), emits
 * topic.unsubscribed (source `api`) and is idempotent: `removed` says whether it was active.
 */
import { Type, type Static } from '@sinclair/typebox';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx, type DbClient } from '../../shared/db/pool.js';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import type { AdminGuard } from './admin-auth.js';
import { findContact, type Queryable } from './contacts.js';
import type { ApiDeps } from './deps.js';
import { sendDoiConfirmation, systemFrom } from './doi.js';
import { DOUBLE_OPT_IN } from './policy.js';
import { API_ERRORS, errors } from './schemas.js';

export type DoiStatus = 'not_required' | 'pending' | 'confirmed';

export interface Topic {
  id: string;
  name: string;
  requireDoubleOptIn: boolean;
  createdAt: string;
  updatedAt: string;
}

interface TopicRow {
  id: string;
  name: string;
  require_double_opt_in: boolean;
  created_at: Date;
  updated_at: Date;
}

const toTopic = (r: TopicRow): Topic => ({
  id: r.id,
  name: r.name,
  requireDoubleOptIn: r.require_double_opt_in,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
});

export async function getTopic(q: Queryable, id: string): Promise<Topic | null> {
  const r = await q.query<TopicRow>(`SELECT id, name, require_double_opt_in, created_at, updated_at FROM topics WHERE id = $1`, [id]);
  return r.rows[0] ? toTopic(r.rows[0]) : null;
}

interface MembershipRow {
  doi_status: DoiStatus;
  doi_sent_at: Date | null;
  unsubscribed_at: Date | null;
}

/**
 * Makes the contact an active member (in the caller's transaction). Returns the status and
 * whether a confirmation email is due; the caller sends it after commit.
 */
export async function subscribe(
  c: DbClient,
  topic: Topic,
  contactId: string,
  source: string,
  nowMs: number,
): Promise<{ doiStatus: DoiStatus; sendConfirmation: boolean }> {
  const now = new Date(nowMs);
  const initial: DoiStatus = topic.requireDoubleOptIn ? 'pending' : 'not_required';
  const ins = await c.query(
    `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, doi_sent_at, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (topic_id, contact_id) DO NOTHING`,
    [topic.id, contactId, initial, source, topic.requireDoubleOptIn ? now : null, now],
  );
  if (ins.rowCount === 1) return { doiStatus: initial, sendConfirmation: topic.requireDoubleOptIn };

  const r = await c.query<MembershipRow>(
    `SELECT doi_status, doi_sent_at, unsubscribed_at FROM topic_memberships WHERE topic_id = $1 AND contact_id = $2 FOR UPDATE`,
    [topic.id, contactId],
  );
  const m = r.rows[0]!;
  if (m.unsubscribed_at) {
    await c.query(
      `UPDATE topic_memberships SET doi_status = $3, source = $4, unsubscribed_at = NULL, confirmed_at = NULL, doi_sent_at = $5, updated_at = $6
        WHERE topic_id = $1 AND contact_id = $2`,
      [topic.id, contactId, initial, source, topic.requireDoubleOptIn ? now : null, now],
    );
    return { doiStatus: initial, sendConfirmation: topic.requireDoubleOptIn };
  }
  if (m.doi_status === 'pending' && (!m.doi_sent_at || nowMs - m.doi_sent_at.getTime() >= DOUBLE_OPT_IN.resendAfterMs)) {
    await c.query(`UPDATE topic_memberships SET doi_sent_at = $3, updated_at = $3 WHERE topic_id = $1 AND contact_id = $2`, [topic.id, contactId, now]);
    return { doiStatus: 'pending', sendConfirmation: true };
  }
  return { doiStatus: m.doi_status, sendConfirmation: false };
}

const TopicParams = Type.Object({ topicId: Type.String({ minLength: 1, maxLength: 100 }) });
const MemberParams = Type.Object({
  topicId: Type.String({ minLength: 1, maxLength: 100 }),
  emailOrId: Type.String({ minLength: 1, maxLength: 320, description: 'A URL-encoded email or a contact id' }),
});
const AddBody = Type.Object(
  {
    email: Type.Optional(Type.String({ minLength: 1, maxLength: 320 })),
    contactId: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  },
  { additionalProperties: false, description: 'Exactly one of email or contactId' },
);
const AddResult = Type.Object({
  data: Type.Object({
    success: Type.Boolean(),
    contactId: Type.String(),
    topicId: Type.String(),
    doiStatus: Type.Union([Type.Literal('not_required'), Type.Literal('pending'), Type.Literal('confirmed')]),
  }),
});
const RemoveResult = Type.Object({ data: Type.Object({ success: Type.Boolean(), removed: Type.Boolean() }) });

const topicMissing = () => notFound('Topic not found', 'topic_not_found');
const contactMissing = () => notFound('Contact not found', 'contact_not_found');

export function topicMemberRoutes(app: HttpApp, d: ApiDeps): void {
  const tags = ['topics'];
  const security = [{ apiKey: [] }];

  app.post(
    '/api/v1/topics/:topicId/contacts',
    {
      config: { scope: 'topics:write' },
      schema: {
        tags,
        security,
        summary: 'Add a contact to a topic',
        description: 'With requireDoubleOptIn the status is `pending` and a confirmation email is sent; 503 when no provider is configured.',
        params: TopicParams,
        body: AddBody,
        response: { 201: AddResult, ...errors(...API_ERRORS, 404, 503) },
      },
    },
    async (req, reply) => {
      const { topicId } = req.params as Static<typeof TopicParams>;
      const b = req.body as Static<typeof AddBody>;
      if ((b.email === undefined) === (b.contactId === undefined)) {
        throw badInput('Give exactly one of email or contactId', 'validation_error');
      }
      let ref = b.contactId;
      if (b.email !== undefined) {
        const email = normalizeAddress(b.email);
        if (!email) throw badInput(`Invalid email address: ${JSON.stringify(b.email.slice(0, 100))}`, 'invalid_email');
        ref = email;
      }
      const topic = await getTopic(d.db, topicId);
      if (!topic) throw topicMissing();
      if (topic.requireDoubleOptIn) await d.sender.provider('transactional', systemFrom(d.config).address); // refuse before writing when nothing can send
      const now = d.clock.now();
      const { contact, result } = await tx(d.db, async (c) => {
        const contact = await findContact(c, ref!);
        if (!contact) throw contactMissing();
        return { contact, result: await subscribe(c, topic, contact.id, 'api', now) };
      });
      if (result.sendConfirmation) {
        try {
          await sendDoiConfirmation({ signer: await d.signer(), sender: d.sender, config: d.config, nowMs: now }, contact, topic);
        } catch (err) {
          // Not sent: let the next add send it instead of waiting for the resend interval.
          await d.db
            .query(`UPDATE topic_memberships SET doi_sent_at = NULL WHERE topic_id = $1 AND contact_id = $2 AND doi_status = 'pending'`, [topic.id, contact.id])
            .catch(() => {});
          throw err;
        }
      }
      reply.code(201);
      return { data: { success: true, contactId: contact.id, topicId: topic.id, doiStatus: result.doiStatus } };
    },
  );

  app.delete(
    '/api/v1/topics/:topicId/contacts/:emailOrId',
    {
      config: { scope: 'topics:write' },
      schema: {
        tags,
        security,
        summary: 'Remove a contact from a topic',
        description: 'Idempotent: `removed` is false when the contact was not an active member.',
        params: MemberParams,
        response: { 200: RemoveResult, ...errors(...API_ERRORS, 404) },
      },
    },
    async (req) => {
      const { topicId, emailOrId } = req.params as Static<typeof MemberParams>;
      const topic = await getTopic(d.db, topicId);
      if (!topic) throw topicMissing();
      const contact = await findContact(d.db, emailOrId);
      if (!contact) throw contactMissing();
      const now = d.clock.now();
      const r = await d.db.query(
        `UPDATE topic_memberships SET unsubscribed_at = $3, updated_at = $3
          WHERE topic_id = $1 AND contact_id = $2 AND unsubscribed_at IS NULL`,
        [topic.id, contact.id, new Date(now)],
      );
      const removed = (r.rowCount ?? 0) > 0;
      if (removed) {
        await d.emitTopicUnsubscribed({ contactId: contact.id, email: contact.email, topicId: topic.id, topicName: topic.name, unsubscribedAt: toIso(now) });
      }
      return { data: { success: true, removed } };
    },
  );
}

const TopicOut = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    requireDoubleOptIn: Type.Boolean(),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Topic', title: 'Topic' },
);
export const TOPIC_SCHEMAS = [TopicOut];
const TopicRef = Type.Ref('Topic');
const TopicBody = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 200 }), requireDoubleOptIn: Type.Optional(Type.Boolean({ default: false })) },
  { additionalProperties: false },
);
const TopicPatch = Type.Object(
  { name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })), requireDoubleOptIn: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

export function adminTopicRoutes(app: HttpApp, d: ApiDeps, guard: AdminGuard): void {
  const tags = ['admin'];
  const security = [{ adminToken: [] }];
  const duplicate = (name: string) => conflict(`A topic named ${JSON.stringify(name)} already exists`, 'duplicate_topic');
  const isUnique = (err: unknown) => (err as { code?: string }).code === '23505';

  app.post(
    '/admin/topics',
    { onRequest: guard, schema: { tags, security, summary: 'Create a topic', body: TopicBody, response: { 201: Type.Object({ data: TopicRef }), ...errors(400, 401, 409) } } },
    async (req, reply) => {
      const b = req.body as Static<typeof TopicBody>;
      const now = new Date(d.clock.now());
      const name = b.name.trim();
      if (!name) throw badInput('name must not be blank', 'validation_error');
      try {
        const r = await d.db.query<TopicRow>(
          `INSERT INTO topics (id, name, require_double_opt_in, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
           RETURNING id, name, require_double_opt_in, created_at, updated_at`,
          [newId('tp', now.getTime()), name, b.requireDoubleOptIn ?? false, now],
        );
        reply.code(201);
        return { data: toTopic(r.rows[0]) };
      } catch (err) {
        if (isUnique(err)) throw duplicate(name);
        throw err;
      }
    },
  );

  app.get(
    '/admin/topics',
    { onRequest: guard, schema: { tags, security, summary: 'List topics', response: { 200: Type.Object({ data: Type.Array(TopicRef) }), ...errors(401) } } },
    async () => {
      const r = await d.db.query<TopicRow>(`SELECT id, name, require_double_opt_in, created_at, updated_at FROM topics ORDER BY id`);
      return { data: r.rows.map(toTopic) };
    },
  );

  app.get(
    '/admin/topics/:id',
    { onRequest: guard, schema: { tags, security, summary: 'Get a topic', params: IdParams, response: { 200: Type.Object({ data: TopicRef }), ...errors(401, 404) } } },
    async (req) => {
      const t = await getTopic(d.db, (req.params as Static<typeof IdParams>).id);
      if (!t) throw topicMissing();
      return { data: t };
    },
  );

  app.patch(
    '/admin/topics/:id',
    {
      onRequest: guard,
      schema: { tags, security, summary: 'Update a topic', params: IdParams, body: TopicPatch, response: { 200: Type.Object({ data: TopicRef }), ...errors(400, 401, 404, 409) } },
    },
    async (req) => {
      const { id } = req.params as Static<typeof IdParams>;
      const b = req.body as Static<typeof TopicPatch>;
      const name = b.name?.trim();
      if (name === '') throw badInput('name must not be blank', 'validation_error');
      try {
        const r = await d.db.query<TopicRow>(
          `UPDATE topics SET name = coalesce($2, name), require_double_opt_in = coalesce($3, require_double_opt_in), updated_at = $4
            WHERE id = $1 RETURNING id, name, require_double_opt_in, created_at, updated_at`,
          [id, name ?? null, b.requireDoubleOptIn ?? null, new Date(d.clock.now())],
        );
        if (!r.rows[0]) throw topicMissing();
        return { data: toTopic(r.rows[0]) };
      } catch (err) {
        if (isUnique(err)) throw duplicate(name!);
        throw err;
      }
    },
  );

  app.delete(
    '/admin/topics/:id',
    {
      onRequest: guard,
      schema: {
        tags,
        security,
        summary: 'Delete a topic and its memberships',
        params: IdParams,
        response: { 200: Type.Object({ data: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }) }), ...errors(401, 404) },
      },
    },
    async (req) => {
      const { id } = req.params as Static<typeof IdParams>;
      const r = await d.db.query(`DELETE FROM topics WHERE id = $1`, [id]);
      if (!r.rowCount) throw topicMissing();
      return { data: { id, deleted: true as const } };
    },
  );
}
