/**
 * Inbound delivery feedback: provider and MTA webhooks (verified, translated into one
 * lifecycle, applied once) and the admin routes over what they record. See docs/feedback.md.
 */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { feedbackAdminRoutes } from './admin.js';
import type { EventEmitter } from './pipeline.js';
import { feedbackWebhookRoutes, type WebhookOptions } from './routes.js';
import { MtaDropReconciler } from './mta-drops.js';

export { isCampaignSendingPaused } from './sending-pause.js';
export { applyFeedback } from './pipeline.js';
export type { FeedbackEvent, LifecycleEvent, LifecycleStatus, SuppressionReason } from './lifecycle.js';

/** Registers the routes; start() begins reading the MTA's silent drops when an MTA is configured. */
export function registerFeedback(
  app: HttpApp,
  s: Services,
  events: EventEmitter,
  peers: { mtaUrl: string | undefined },
  opts: WebhookOptions = {},
): { start(): void; stop(): Promise<void> } {
  const log = s.log.child({ area: 'feedback' });
  feedbackWebhookRoutes(app, { db: s.db, clock: s.clock, log, config: s.config, events, organizationId: s.config.ORGANIZATION_ID }, opts);
  feedbackAdminRoutes(app, { config: s.config, db: s.db, clock: s.clock, log });
  const drops =
    peers.mtaUrl && s.config.MTA_API_KEY
      ? new MtaDropReconciler({ db: s.db, clock: s.clock, log, events, coord: s.coord, mtaUrl: peers.mtaUrl, apiKey: s.config.MTA_API_KEY, organizationId: s.config.ORGANIZATION_ID })
      : undefined;
  app.decorate('mtaDrops', drops);
  return { start: () => drops?.start(), stop: async () => drops?.stop() };
}
