/**
 * The admin API's guard: `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time.
 * Missing or wrong token: 401 unauthenticated. Other areas' admin routes use the same guard.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { safeEqual } from '../../shared/crypto.js';
import { unauthenticated, unavailable } from '../../shared/errors.js';

export type AdminGuard = (req: FastifyRequest, reply: FastifyReply) => Promise<void>;

export const ADMIN_AUTH_MESSAGE = 'Missing or invalid Authorization header. Use: Authorization: Bearer <ADMIN_TOKEN>';

export function adminGuard(token: string | undefined): AdminGuard {
  return async (req) => {
    if (!token) throw unavailable('The admin API is disabled: ADMIN_TOKEN is not set', 'admin_disabled');
    const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(req.headers.authorization ?? '');
    if (!m || !safeEqual(m[1], token)) throw unauthenticated(ADMIN_AUTH_MESSAGE);
  };
}
