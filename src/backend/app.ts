import { createHttpApp, edgeLimits, type HttpApp } from '../shared/http.js';
import type { Services } from '../shared/services.js';
import { healthRoutes } from './routes/health.js';
import { EventBus } from './events.js';
import { registerWebhooks } from './webhooks/index.js';
import { registerFeedback } from './feedback/index.js';
import { registerMailboxes } from './mailboxes/index.js';
import { registerPublic } from './public/index.js';
import { PublicRateLimiter, parseRateLimitOverrides } from './public/rate-limit.js';
import { registerCampaigns } from './campaigns/index.js';
import { registerApi, registerOpenApi } from './api/index.js';
import { registerAdmin } from './admin/index.js';
import { providerSettings } from './api/sending/provider.js';
import { ProviderRouter } from './api/sending/router.js';
import { registerDashboard } from './ui/index.js';
import { systemFrom } from './api/doi.js';

/**
 * The backend's peer, given when it is built: it is read while answering requests (a send
 * through EMAIL_PROVIDER=mta), which start as soon as the backend listens.
 */
export interface BackendPeers {
  /** Where the `mta` sending provider posts (`{mtaUrl}/send`); unset: such sends are refused. */
  mtaUrl: string | undefined;
}

export interface BackendRole {
  app: HttpApp;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The backend: /api/v1, admin API, public endpoints, webhooks. Each area is one plugin. */
export async function createBackend(s: Services, peers: BackendPeers): Promise<BackendRole> {
  const app = createHttpApp({ log: s.log.child({ role: 'backend' }), trustProxy: s.config.TRUST_PROXY, limits: edgeLimits(s.config) });
  await registerOpenApi(app); // first: documents every route registered after it
  // One limiter for the public routes and the health check (docs/public-endpoints.md → Rate limits).
  const limiter = new PublicRateLimiter(s.coord, parseRateLimitOverrides(s.config.PUBLIC_RATE_LIMITS));
  healthRoutes(app, s, limiter);
  registerAdmin(app, s); // before the other areas: its audit hook covers their admin routes
  const events = new EventBus({ clock: s.clock, log: s.log });
  app.decorate('events', events);
  const providers = new ProviderRouter(providerSettings(s.config, peers.mtaUrl), { db: s.db, clock: s.clock, log: s.log.child({ area: 'sending' }) });
  const webhooks = registerWebhooks(app, s, events);
  registerFeedback(app, s, events);
  registerMailboxes(app, s, peers);
  const publicArea = await registerPublic(app, s, providers, events, limiter);
  const campaigns = await registerCampaigns(app, s, publicArea, providers, events);
  const api = await registerApi(app, s, providers, events);
  await registerDashboard(app, s, providers, events, peers.mtaUrl);
  await app.ready();
  return {
    app,
    async start() {
      const system = systemFrom(s.config).address;
      if (!s.config.EMAIL_FROM && system.split('@')[1] !== new URL(s.config.BASE_URL ?? 'http://localhost').hostname) {
        s.log.warn({ from: system }, 'EMAIL_FROM is unset and BASE_URL names no mail domain: system mail (double opt-in) comes from this address; set EMAIL_FROM');
      }
      await providers.start();
      await webhooks.start();
      await publicArea.start();
      await campaigns.start();
      await api.start();
    },
    async stop() {
      await api.stop();
      await campaigns.stop();
      await publicArea.stop();
      await webhooks.stop();
      await providers.stop();
    },
  };
}
