/**
 * Preference center: GET /prefs/verify/:token lists the contact's topics and their states;
 * POST /prefs/update/:token changes them per topic (`{ topics: [{ id, subscribed }] }`) or
 * unsubscribes from all (`{ unsubscribeAll: true }`). Only topics the contact has a
 * membership of can be changed; a pending double opt-in stays pending.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { tx } from '../../shared/db/pool.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Signer } from '../../shared/signing.js';
import type { EventBus } from '../events.js';
import type { PublicRateLimiter } from './rate-limit.js';
import { loadSubscriptions, resubscribeTopics, unsubscribeTopics, type ContactSubscriptions } from './subscriptions.js';
import { maskEmail, PURPOSE, readToken, validPreferences, type PreferencesData } from './tokens.js';

export interface PreferencesDeps {
  db: Db;
  clock: Clock;
  signer: Signer;
  limiter: PublicRateLimiter;
  events?: EventBus;
  organizationName: string;
}

const UpdateBody = Type.Object(
  {
    topics: Type.Optional(
      Type.Array(Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }), subscribed: Type.Boolean() }, { additionalProperties: false }), {
        maxItems: 500,
      }),
    ),
    unsubscribeAll: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const tokenOf = (req: FastifyRequest): string => (req.params as { '*': string })['*'];

export function preferencesRoutes(app: HttpApp, d: PreferencesDeps): void {
  const limit = { onRequest: async (req: FastifyRequest) => d.limiter.take('publicIp', req) };
  const view = (s: ContactSubscriptions) => ({
    ok: true,
    data: { email: maskEmail(s.email), organizationName: d.organizationName, topics: s.topics },
  });
  const contactOf = (token: string) => readToken<PreferencesData>(d.signer, PURPOSE.preferences, token, d.clock.now(), validPreferences).data.c;

  app.get('/prefs/verify/*', limit, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const subs = await loadSubscriptions(d.db, contactOf(tokenOf(req)));
    if (!subs) throw notFound('This subscriber no longer exists', 'contact_not_found');
    return view(subs);
  });

  app.post('/prefs/update/*', { ...limit, schema: { body: UpdateBody } }, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const contactId = contactOf(tokenOf(req));
    const body = req.body as Static<typeof UpdateBody>;
    if (!body.unsubscribeAll && !body.topics) throw badInput('Send topics or unsubscribeAll', 'validation_error');
    const now = d.clock.now();
    const { subs, unsubscribed } = await tx(d.db, async (c) => {
      const before = await loadSubscriptions(c, contactId);
      if (!before) throw notFound('This subscriber no longer exists', 'contact_not_found');
      const known = new Set(before.topics.map((t) => t.id));
      const unknown = (body.topics ?? []).find((t) => !known.has(t.id));
      if (unknown) throw badInput(`Unknown topic: ${unknown.id}`, 'validation_error');
      const off = body.unsubscribeAll ? null : body.topics!.filter((t) => !t.subscribed).map((t) => t.id);
      const on = body.unsubscribeAll ? [] : body.topics!.filter((t) => t.subscribed).map((t) => t.id);
      const changed = off === null || off.length > 0 ? await unsubscribeTopics(c, contactId, off, now) : [];
      await resubscribeTopics(c, contactId, on, now);
      return { subs: (await loadSubscriptions(c, contactId))!, unsubscribed: changed };
    });
    if (d.events) {
      await Promise.all(
        unsubscribed.map((t) =>
          d.events!.emit('topic.unsubscribed', {
            contactId,
            email: subs.email,
            topicId: t.id,
            topicName: t.name,
            source: 'preference_center',
            emailId: null,
            campaignId: null,
            unsubscribedAt: toIso(now),
          }),
        ),
      );
    }
    return view(subs);
  });
}
