/**
 * Personal mailboxes (docs/inbound.md): the records and their admin routes here; the MTA's
 * deliveries arrive at `POST /webhooks/mta-mailbox` (feedback/routes.ts, signed like the
 * MTA's events) and are stored by ./store.ts.
 */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { MtaMailboxCache } from './mta-cache.js';
import { mailboxAdminRoutes } from './routes.js';

export function registerMailboxes(app: HttpApp, s: Services, peers: { mtaUrl: string | undefined }): void {
  const log = s.log.child({ area: 'mailboxes' });
  const cache = new MtaMailboxCache({ mtaUrl: peers.mtaUrl, apiKey: s.config.MTA_API_KEY, log });
  app.addHook('onClose', async () => cache.close());
  mailboxAdminRoutes(app, { config: s.config, db: s.db, clock: s.clock, log, cache });
}
