/**
 * /api/v1 authentication, rate limiting and scopes, as one onRequest hook (before the body
 * is read: unauthenticated or throttled requests cost no parsing).
 *
 * Order: credentials (401) → rate limit (429) → scope (403). A key that authenticates is
 * charged for the request even when it lacks the scope, so every authenticated response,
 * the 403 and the 429 included, carries the X-RateLimit-* headers; a 401 never does.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError, forbidden, unauthenticated } from '../../shared/errors.js';
import type { Services } from '../../shared/services.js';
import { hashApiKey, hasKeyFormat, type Scope } from './keys.js';
import { API_KEYS, API_RATE_LIMIT } from './policy.js';

/** Spec failure table, verbatim. */
export const AUTH_MESSAGES = {
  missing: 'Missing or invalid Authorization header. Use: Authorization: Bearer <api_key>',
  format: 'Invalid API key format',
  invalid: 'Invalid API key',
  scope: (scope: string) => `This API key is missing the required scope: ${scope}`,
  rateLimited: 'Rate limit exceeded. Maximum 10 requests per second.',
} as const;

export interface ApiPrincipal {
  keyId: string;
  scopes: readonly string[];
}

declare module 'fastify' {
  interface FastifyRequest {
    apiKey?: ApiPrincipal;
  }
  interface FastifyContextConfig {
    /** Scope an /api/v1 route requires. */
    scope?: Scope;
  }
}

/**
 * The key from `Authorization: Bearer <key>` or the bare `Authorization: <key>`. null when
 * the header is missing, empty or carries another scheme (e.g. `Basic ...`).
 */
export function keyFromHeader(header: string | undefined): string | null {
  if (!header) return null;
  const v = header.trim();
  if (!v) return null;
  const bearer = /^Bearer(?:[ \t]+(\S*))?$/i.exec(v);
  if (bearer) return bearer[1] || null;
  return /\s/.test(v) ? null : v;
}

interface KeyRow {
  id: string;
  scopes: string[];
  revoked_at: Date | null;
  last_used_at: Date | null;
}

export function apiKeyAuth(s: Pick<Services, 'db' | 'coord' | 'clock' | 'log'>) {
  let lastLimiterError = 0;
  return async function authenticate(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    const key = keyFromHeader(req.headers.authorization);
    if (!key) throw unauthenticated(AUTH_MESSAGES.missing);
    if (!hasKeyFormat(key)) throw unauthenticated(AUTH_MESSAGES.format);
    // Looked up on every request, so a revocation takes effect on the next one, fleet-wide.
    const r = await s.db.query<KeyRow>(`SELECT id, scopes, revoked_at, last_used_at FROM api_keys WHERE key_hash = $1`, [hashApiKey(key)]);
    const row = r.rows[0];
    if (!row || row.revoked_at) throw unauthenticated(AUTH_MESSAGES.invalid);

    const now = s.clock.now();
    let bucket;
    try {
      bucket = await s.coord.tokenBucket(`api:rate:${row.id}`, API_RATE_LIMIT.capacity, API_RATE_LIMIT.refillPerSecond);
    } catch (err) {
      // The limiter protects the service; it must not take the API down with it (fail open).
      if (now - lastLimiterError > 10_000) {
        lastLimiterError = now;
        s.log.error({ err }, 'API rate limiter unavailable; allowing requests');
      }
    }
    if (bucket) {
      reply.header('X-RateLimit-Limit', String(API_RATE_LIMIT.refillPerSecond));
      reply.header('X-RateLimit-Remaining', String(Math.max(0, Math.floor(bucket.remaining))));
      reply.header('X-RateLimit-Reset', String(Math.ceil((now + bucket.resetMs) / 1000)));
      if (!bucket.allowed) {
        throw new AppError('rate_limited', AUTH_MESSAGES.rateLimited, {
          headers: { 'Retry-After': String(Math.max(1, Math.ceil(bucket.retryAfterMs / 1000))) },
        });
      }
    }

    if (!row.last_used_at || now - row.last_used_at.getTime() >= API_KEYS.lastUsedResolutionMs) {
      s.db
        .query(`UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, [row.id, new Date(now)])
        .catch((err) => s.log.warn({ err }, 'could not record API key use'));
    }

    const scope = req.routeOptions.config.scope;
    if (scope && !row.scopes.includes(scope)) throw forbidden(AUTH_MESSAGES.scope(scope));
    req.apiKey = { keyId: row.id, scopes: row.scopes };
  };
}
