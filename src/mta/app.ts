import { createHttpApp, type HttpApp } from '../shared/http.js';
import type { Services } from '../shared/services.js';
import { createMtaQueue } from './queue.js';
import { healthRoutes } from './routes/health.js';

export interface MtaRole {
  app: HttpApp;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The MTA: HTTP API, queue workers, delivery. */
export async function createMta(s: Services): Promise<MtaRole> {
  const app = createHttpApp({ log: s.log.child({ role: 'mta' }) });
  const queue = createMtaQueue(s);
  healthRoutes(app, s, queue);
  await app.ready();
  return {
    app,
    async start() {},
    async stop() {},
  };
}
