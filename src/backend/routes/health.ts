import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { envelope } from '../../shared/errors.js';
import { VERSION } from '../../shared/version.js';
import type { PublicRateLimiter } from '../public/rate-limit.js';

/**
 * GET /api/v1/health — 200 when the store answers, 503 in the envelope when it does not. Public,
 * so rate limited per IP like the other public routes (rule `health`), before the store is asked.
 */
export function healthRoutes(app: HttpApp, s: Pick<Services, 'db' | 'coord'>, limiter: PublicRateLimiter): void {
  app.get('/api/v1/health', { onRequest: async (req) => limiter.take('health', req) }, async (_req, reply) => {
    const [store, coordination] = await Promise.all([
      s.db.query('SELECT 1').then(() => 'ok', () => 'down'),
      s.coord.ping().then((ok) => (ok ? 'ok' : 'down'), () => 'down'),
    ]);
    if (store !== 'ok' || coordination !== 'ok') {
      return reply.code(503).send(envelope('unavailable', `Unhealthy: store ${store}, coordination ${coordination}`));
    }
    return { data: { status: 'ok', version: VERSION, store, coordination: `${coordination} (${s.coord.kind})` } };
  });
}
