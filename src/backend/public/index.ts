/**
 * The public endpoints (no API key; token or identifier in the path) and the pages people
 * reach from emails, as one backend plugin. Returns start/stop for the tracking recorder:
 * stop() writes every buffered hit (called after the HTTP server has drained).
 */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { loadSigner, type Signer } from '../../shared/signing.js';
import type { EventBus } from '../events.js';
import { pageRoutes } from '../pages/routes.js';
import { archiveRoutes } from './archive.js';
import { PublicRateLimiter, parseRateLimitOverrides } from './rate-limit.js';
import { shareRoutes } from './share.js';
import { LinkSigner } from './tracked-links.js';
import { TrackingRecorder } from './tracking-recorder.js';
import { trackingRoutes } from './tracking.js';

export interface PublicArea {
  limiter: PublicRateLimiter;
  recorder: TrackingRecorder;
  links: LinkSigner;
  signer: Signer;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function registerPublic(app: HttpApp, s: Services, events: EventBus | undefined): Promise<PublicArea> {
  const limiter = new PublicRateLimiter(s.coord, parseRateLimitOverrides(s.config.PUBLIC_RATE_LIMITS));
  const signer = await loadSigner(s.db);
  const links = new LinkSigner(signer);
  const recorder = new TrackingRecorder({
    db: s.db,
    clock: s.clock,
    log: s.log.child({ area: 'tracking' }),
    emitter: events && {
      opened: (data) => events.emit('email.opened', data),
      clicked: (data) => events.emit('email.clicked', data),
    },
  });

  trackingRoutes(app, { clock: s.clock, limiter, recorder, links });
  archiveRoutes(app, { db: s.db, limiter });
  shareRoutes(app, { db: s.db, clock: s.clock, organizationName: s.config.ORGANIZATION_NAME, limiter });
  pageRoutes(app, { limitIp: (req) => limiter.take('publicIp', req) });

  return {
    limiter,
    recorder,
    links,
    signer,
    async start() {
      recorder.start();
    },
    async stop() {
      await recorder.stop();
    },
  };
}
