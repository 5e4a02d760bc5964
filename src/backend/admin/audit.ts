/**
 * The audit log: every successful write through the admin guard (a session user, or the
 * bearer token as `token`) records who, what (method, route pattern, target id) and when.
 * Written in onSend, before the answer leaves, so a client that reads the log next sees it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { isUnsafe } from '../api/admin-auth.js';

/** The target of a write: the route's :id, else the `data.id` of a JSON answer (creations). */
function targetOf(req: FastifyRequest, payload: unknown): string | null {
  const params = req.params as Record<string, unknown> | undefined;
  for (const k of ['id', 'token']) if (typeof params?.[k] === 'string') return params[k] as string;
  if (typeof payload === 'string' && payload.length < 64 * 1024 && payload.startsWith('{')) {
    try {
      const id = (JSON.parse(payload) as { data?: { id?: unknown; user?: { id?: unknown } } }).data;
      const v = id?.id ?? id?.user?.id;
      if (typeof v === 'string') return v;
    } catch {
      // not JSON: no target
    }
  }
  return null;
}

export function auditHook(d: { db: Db; clock: Clock; log: Logger }) {
  return async (req: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    const actor = req.adminActor;
    if (!actor || !isUnsafe(req.method) || reply.statusCode >= 400) return payload;
    const now = d.clock.now();
    await d.db.query(
      `INSERT INTO admin_audit_log (id, actor_id, actor, role, method, route, target_id, status, ip, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
      [newId('aud', now), actor.userId, actor.name, actor.role, req.method, req.routeOptions.url ?? req.url, targetOf(req, payload), reply.statusCode, req.ip, toIso(now)],
    );
    return payload;
  };
}
