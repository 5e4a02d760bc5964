/**
 * Bearer ADMIN_TOKEN check for the admin routes of templates, share links, forms and
 * campaigns. Interim: replaced by the backend's shared admin auth hook (REST API area) once
 * it exists; the rule is the same (401 unauthenticated, constant-time comparison).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { safeEqual } from '../../shared/crypto.js';
import { unauthenticated, unavailable } from '../../shared/errors.js';

export type AdminGuard = (req: FastifyRequest, reply: FastifyReply) => Promise<void>;

export function adminGuard(getToken: () => string | undefined): AdminGuard {
  return async (req) => {
    const token = getToken();
    if (!token) throw unavailable('The admin API is disabled: ADMIN_TOKEN is not set');
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
    if (!m || !safeEqual(m[1]!, token)) {
      throw unauthenticated('Missing or invalid Authorization header. Use: Authorization: Bearer <ADMIN_TOKEN>');
    }
  };
}
