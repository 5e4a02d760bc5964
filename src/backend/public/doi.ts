/**
 * Double opt-in confirmation. Two kinds of token reach `/confirm/doi`:
 * - purpose `doi` (REST API area): a membership added with requireDoubleOptIn, pending;
 * - purpose `form-doi` (forms.ts): a form sign-up; the contact is created or added to the
 *   topic only when it is confirmed.
 * GET /confirm/doi/verify?token= only reads (link scanners prefetch GETs); POST
 * /confirm/doi?token= confirms. Confirming twice answers the same; nothing ever moves a
 * confirmed membership back to pending. Lifetime of both tokens: 7 days.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Db, DbClient } from '../../shared/db/pool.js';
import { tx } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Signer } from '../../shared/signing.js';
import { findContact, insertContact, type Contact } from '../api/contacts.js';
import { readDoiToken } from '../api/doi.js';
import type { EventBus } from '../events.js';
import { wantsHtml } from '../pages/pages.js';
import type { PublicRateLimiter } from './rate-limit.js';
import { maskEmail, PURPOSE, tokenError, validFormDoi, type FormDoiData } from './tokens.js';

export interface DoiDeps {
  db: Db;
  clock: Clock;
  signer: Signer;
  limiter: PublicRateLimiter;
  events?: EventBus;
  organizationName: string;
}

const Query = Type.Object({ token: Type.String({ minLength: 1, maxLength: 4096 }) });

type Target =
  | { kind: 'membership'; contactId: string; topicId: string; expiresAt: number | null }
  | { kind: 'signup'; signupId: string; expiresAt: number | null };

interface Context {
  email: string;
  topic: { id: string; name: string } | null;
  confirmed: boolean;
}

const gone = () => notFound('This subscription no longer exists', 'subscription_not_found');

export function doiRoutes(app: HttpApp, d: DoiDeps): void {
  const limit = { onRequest: async (req: FastifyRequest) => d.limiter.take('publicIp', req) };

  /** Which token this is: the MAC tells the purposes apart. */
  const target = (token: string): Target => {
    const now = d.clock.now();
    const api = readDoiToken(d.signer, token, now);
    if (api.ok) return { kind: 'membership', contactId: api.data.c, topicId: api.data.t, expiresAt: api.expiresAt };
    if (api.reason !== 'bad_signature') throw tokenError(api.reason);
    const form = d.signer.verify<FormDoiData>(PURPOSE.formDoi, token, now);
    if (!form.ok) throw tokenError(form.reason);
    if (!validFormDoi(form.data)) throw tokenError('malformed');
    return { kind: 'signup', signupId: form.data.s, expiresAt: form.expiresAt };
  };

  const read = async (q: Pick<DbClient, 'query'>, t: Target, lock = false): Promise<Context & { unsubscribed?: boolean }> => {
    const forUpdate = lock ? ' FOR UPDATE OF x' : '';
    if (t.kind === 'membership') {
      const r = await q.query<{ email: string; topic_id: string; name: string; doi_status: string; unsubscribed_at: Date | null }>(
        `SELECT c.email, tp.id AS topic_id, tp.name, x.doi_status, x.unsubscribed_at
           FROM topic_memberships x JOIN contacts c ON c.id = x.contact_id JOIN topics tp ON tp.id = x.topic_id
          WHERE x.contact_id = $1 AND x.topic_id = $2${forUpdate}`,
        [t.contactId, t.topicId],
      );
      const m = r.rows[0];
      if (!m) throw gone();
      return { email: m.email, topic: { id: m.topic_id, name: m.name }, confirmed: m.doi_status !== 'pending', unsubscribed: m.unsubscribed_at !== null };
    }
    const r = await q.query<{ email: string; topic_id: string | null; name: string | null; status: string }>(
      `SELECT x.email, tp.id AS topic_id, tp.name, x.status
         FROM form_signups x LEFT JOIN topics tp ON tp.id = x.topic_id
        WHERE x.id = $1${forUpdate}`,
      [t.signupId],
    );
    const s = r.rows[0];
    if (!s) throw gone();
    return { email: s.email, topic: s.topic_id ? { id: s.topic_id, name: s.name! } : null, confirmed: s.status === 'confirmed' };
  };

  const answer = (c: Context, expiresAt: number | null) => ({
    ok: true,
    data: {
      email: maskEmail(c.email),
      organizationName: d.organizationName,
      topic: c.topic,
      confirmed: c.confirmed,
      expiresAt,
    },
  });

  app.get('/confirm/doi/verify', { ...limit, schema: { querystring: Query } }, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const t = target((req.query as Static<typeof Query>).token);
    const c = await read(d.db, t);
    if (c.unsubscribed) throw notFound('This subscription was cancelled; sign up again to subscribe', 'subscription_cancelled');
    return answer(c, t.expiresAt);
  });

  app.post('/confirm/doi', { ...limit, schema: { querystring: Query } }, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const token = (req.query as Static<typeof Query>).token;
    const t = target(token);
    const now = d.clock.now();
    const { context, created, formId } = await tx(d.db, async (c) => {
      const before = await read(c, t, true);
      if (before.unsubscribed) throw notFound('This subscription was cancelled; sign up again to subscribe', 'subscription_cancelled');
      if (before.confirmed) return { context: before, created: null, formId: null };
      if (t.kind === 'membership') {
        await c.query(
          `UPDATE topic_memberships SET doi_status = 'confirmed', confirmed_at = COALESCE(confirmed_at, $3), updated_at = $3
            WHERE contact_id = $1 AND topic_id = $2 AND doi_status = 'pending'`,
          [t.contactId, t.topicId, toIso(now)],
        );
        return { context: { ...before, confirmed: true }, created: null, formId: null };
      }
      const r = await confirmSignup(c, t.signupId, now);
      return { context: { ...before, confirmed: true }, created: r.created, formId: r.formId };
    });
    if (created && d.events) await d.events.emit('contact.created', { ...created, formId });
    if (wantsHtml(req.headers.accept)) return reply.code(303).header('location', `/confirm/doi?token=${encodeURIComponent(token)}&done=1`).send();
    return answer(context, t.expiresAt);
  });
}

/**
 * Makes a pending form sign-up real (inside the caller's transaction, sign-up row locked):
 * the contact is created (source `form`) or found by address, and added to the form's
 * topic as confirmed. An existing membership is confirmed and re-activated, never downgraded.
 */
async function confirmSignup(c: DbClient, signupId: string, now: number): Promise<{ created: Contact | null; formId: string }> {
  const s = (
    await c.query<{ form_id: string; topic_id: string | null; email: string; first_name: string | null; last_name: string | null }>(
      'SELECT form_id, topic_id, email, first_name, last_name FROM form_signups WHERE id = $1',
      [signupId],
    )
  ).rows[0]!;
  let created: Contact | null = null;
  let contact = await findContact(c, s.email, { forUpdate: true });
  if (!contact) {
    created = await insertContact(c, { email: s.email, firstName: s.first_name, lastName: s.last_name, source: 'form' }, now);
    contact = created ?? (await findContact(c, s.email, { forUpdate: true }));
    if (!contact) throw new Error('contact vanished while confirming a sign-up');
  } else if ((s.first_name && !contact.firstName) || (s.last_name && !contact.lastName)) {
    await c.query(
      'UPDATE contacts SET first_name = COALESCE(first_name, $2), last_name = COALESCE(last_name, $3), updated_at = $4 WHERE id = $1',
      [contact.id, s.first_name, s.last_name, toIso(now)],
    );
  }
  if (s.topic_id) {
    await c.query(
      `INSERT INTO topic_memberships AS m (topic_id, contact_id, doi_status, source, confirmed_at, created_at, updated_at)
       VALUES ($1, $2, 'confirmed', 'form', $3, $3, $3)
       ON CONFLICT (topic_id, contact_id) DO UPDATE
         SET doi_status = 'confirmed', confirmed_at = COALESCE(m.confirmed_at, EXCLUDED.confirmed_at),
             unsubscribed_at = NULL, updated_at = EXCLUDED.updated_at`,
      [s.topic_id, contact.id, toIso(now)],
    );
  }
  await c.query(`UPDATE form_signups SET status = 'confirmed', contact_id = $2, confirmed_at = $3, updated_at = $3 WHERE id = $1`, [
    signupId,
    contact.id,
    toIso(now),
  ]);
  return { created, formId: s.form_id };
}
