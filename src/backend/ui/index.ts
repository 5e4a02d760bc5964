/**
 * The dashboard area: its static files and the routes it adds to the admin API. mtaUrl is the
 * backend's MTA peer (MTA_URL, or the in-process MTA), which the deliverability screens read.
 */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { loadSigner } from '../../shared/signing.js';
import { adminGuard } from '../api/admin-auth.js';
import { dashboardRoutes, settingsRoute } from './routes.js';
import { registerDashboardStatic } from './static.js';
import { testSendRoute } from './test-send.js';
import { mtaProxyRoutes } from './mta-proxy.js';
import { SendService } from '../api/sending/send.js';
import type { ProviderRouter } from '../api/sending/router.js';
import type { EventBus } from '../events.js';

export async function registerDashboard(app: HttpApp, s: Services, providers: ProviderRouter, events: EventBus, mtaUrl: string | undefined): Promise<void> {
  const guard = adminGuard(s);
  const sender = new SendService({ db: s.db, clock: s.clock, log: s.log, providers, events });
  await app.register(async (scope) => {
    dashboardRoutes(scope, { db: s.db, clock: s.clock, guard, signer: () => loadSigner(s.db) });
    testSendRoute(scope, { db: s.db, guard, sender });
    mtaProxyRoutes(scope, { guard, mtaUrl, mtaApiKey: s.config.MTA_API_KEY });
    settingsRoute(scope, { guard, config: s.config });
  });
  registerDashboardStatic(app, s.log.child({ area: 'dashboard' }));
}
