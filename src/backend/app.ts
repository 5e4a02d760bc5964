import { createHttpApp, type HttpApp } from '../shared/http.js';
import type { Services } from '../shared/services.js';
import { healthRoutes } from './routes/health.js';

export interface BackendRole {
  app: HttpApp;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The backend: /api/v1, admin API, public endpoints, webhooks. Each area is one plugin. */
export async function createBackend(s: Services): Promise<BackendRole> {
  const app = createHttpApp({ log: s.log.child({ role: 'backend' }) });
  healthRoutes(app, s);
  await app.ready();
  return {
    app,
    async start() {},
    async stop() {},
  };
}
