/**
 * One-click unsubscribe (RFC 8058) and its page's context:
 * - POST /unsub/:token — the List-Unsubscribe URL. Mail providers POST the form body
 *   `List-Unsubscribe=One-Click` (urlencoded or multipart) without cookies; our page POSTs
 *   the same. The token alone authorizes; the change is committed before the answer, and a
 *   repeat is harmless. A browser form post (no JavaScript) is sent back to the page.
 * - GET /unsub/verify/:token — what the page shows (masked address, topic, current state).
 * The token is a wildcard segment: signed tokens are longer than the router's 100-character
 * limit for named parameters.
 */
import type { FastifyRequest } from 'fastify';
import { toIso } from '../../shared/clock.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import { notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Signer } from '../../shared/signing.js';
import type { EventBus } from '../events.js';
import { wantsHtml } from '../pages/pages.js';
import type { PublicRateLimiter } from './rate-limit.js';
import { campaignOfSend, loadSubscriptions, unsubscribeTopics } from './subscriptions.js';
import { maskEmail, preferencesToken, PURPOSE, readToken, validUnsubscribe, type UnsubscribeData } from './tokens.js';

export interface UnsubscribeDeps {
  db: Db;
  clock: Clock;
  signer: Signer;
  limiter: PublicRateLimiter;
  events?: EventBus;
  organizationName: string;
  baseUrl: string;
}

const tokenOf = (req: FastifyRequest): string => (req.params as { '*': string })['*'];

/** Where the request came from: our page says so; everything else is a mail client's one-click. */
function via(body: unknown): 'unsubscribe_page' | 'one_click' {
  return typeof body === 'object' && body !== null && (body as Record<string, unknown>).via === 'page' ? 'unsubscribe_page' : 'one_click';
}

export function unsubscribeRoutes(app: HttpApp, d: UnsubscribeDeps): void {
  const limit = { onRequest: async (req: FastifyRequest) => d.limiter.takeToken('unsubscribe', req, tokenOf(req)) };

  const context = async (token: string) => {
    const { data } = readToken<UnsubscribeData>(d.signer, PURPOSE.unsubscribe, token, d.clock.now(), validUnsubscribe);
    const subs = await loadSubscriptions(d.db, data.c);
    if (!subs) throw notFound('This subscriber no longer exists', 'contact_not_found');
    return { data, subs };
  };

  app.get('/unsub/verify/*', limit, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const { data, subs } = await context(tokenOf(req));
    const topic = data.t ? subs.topics.find((t) => t.id === data.t) : undefined;
    const relevant = data.t ? (topic ? [topic] : []) : subs.topics;
    return {
      ok: true,
      data: {
        email: maskEmail(subs.email),
        organizationName: d.organizationName,
        topic: topic ? { id: topic.id, name: topic.name } : null,
        unsubscribed: relevant.every((t) => !t.subscribed),
        preferencesUrl: `${d.baseUrl}/prefs/${preferencesToken(d.signer, data.c, d.clock.now())}`,
      },
    };
  });

  app.post('/unsub/*', limit, async (req, reply) => {
    reply.header('cache-control', 'no-store');
    const token = tokenOf(req);
    const { data, subs } = await context(token);
    const now = d.clock.now();
    const changed = await unsubscribeTopics(d.db, data.c, data.t ? [data.t] : null, now);
    if (changed.length > 0 && d.events) {
      const campaignId = await campaignOfSend(d.db, data.s);
      const source = via(req.body);
      await Promise.all(
        changed.map((t) =>
          d.events!.emit('topic.unsubscribed', {
            contactId: data.c,
            email: subs.email,
            topicId: t.id,
            topicName: t.name,
            source,
            emailId: data.s ?? null,
            campaignId,
            unsubscribedAt: toIso(now),
          }),
        ),
      );
    }
    if (wantsHtml(req.headers.accept)) return reply.code(303).header('location', `/unsub/${token}?done=1`).send();
    const topic = data.t ? subs.topics.find((t) => t.id === data.t) : undefined;
    return {
      ok: true,
      data: {
        unsubscribed: true,
        email: maskEmail(subs.email),
        topic: topic ? { id: topic.id, name: topic.name } : null,
        topicsChanged: changed.length,
      },
    };
  });
}
