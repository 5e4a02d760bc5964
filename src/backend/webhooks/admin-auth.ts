/**
 * Bearer ADMIN_TOKEN check for the admin routes of this plugin. Interim: replace with the
 * backend's shared admin auth hook once it exists (same rule: 401 unauthenticated).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { safeEqual } from '../../shared/crypto.js';
import { unauthenticated, unavailable } from '../../shared/errors.js';

export function adminAuth(getToken: () => string | undefined) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = getToken();
    if (!token) throw unavailable('The admin API is disabled: ADMIN_TOKEN is not set');
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m || !safeEqual(m[1], token)) {
      throw unauthenticated('Missing or invalid Authorization header. Use: Authorization: Bearer <ADMIN_TOKEN>');
    }
  };
}
