/**
 * Inbound delivery feedback: provider and MTA webhooks (verified, translated into one
 * lifecycle, applied once) and the admin routes over what they record. See docs/feedback.md.
 */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { feedbackAdminRoutes } from './admin.js';
import type { EventEmitter } from './pipeline.js';
import { feedbackWebhookRoutes, type WebhookOptions } from './routes.js';

export { isCampaignSendingPaused } from './sending-pause.js';
export { applyFeedback } from './pipeline.js';
export type { FeedbackEvent, LifecycleEvent, LifecycleStatus, SuppressionReason } from './lifecycle.js';

/**
 * Registers the routes. The MTA's drops (suppressed, screened) arrive as `dropped` events
 * through its outbox like every other delivery result, so nothing here reads the MTA.
 */
export function registerFeedback(
  app: HttpApp,
  s: Services,
  events: EventEmitter,
  opts: WebhookOptions = {},
): void {
  const log = s.log.child({ area: 'feedback' });
  feedbackWebhookRoutes(app, { db: s.db, clock: s.clock, log, config: s.config, events, organizationId: s.config.ORGANIZATION_ID }, opts);
  feedbackAdminRoutes(app, { config: s.config, db: s.db, clock: s.clock, log });
}
