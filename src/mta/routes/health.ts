import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import type { Queue } from '../../shared/queue/queue.js';
import { envelope } from '../../shared/errors.js';

/** GET /health — store, coordination and queue depth; no credential. */
export function healthRoutes(app: HttpApp, s: Pick<Services, 'db' | 'coord'>, queue: Queue<unknown>): void {
  app.get('/health', async (_req, reply) => {
    const [store, coordination, depth] = await Promise.all([
      s.db.query('SELECT 1').then(() => 'ok', () => 'down'),
      s.coord.ping().then((ok) => (ok ? 'ok' : 'down'), () => 'down'),
      queue.depth().catch(() => null),
    ]);
    if (store !== 'ok' || coordination !== 'ok') {
      return reply.code(503).send(envelope('unavailable', `Unhealthy: store ${store}, coordination ${coordination}`));
    }
    return { data: { status: 'ok', store, coordination: `${coordination} (${s.coord.kind})`, queue: { depth } } };
  });
}
