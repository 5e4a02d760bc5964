/**
 * The public endpoints (no API key; token or identifier in the path) and the pages people
 * reach from emails, as one backend plugin. Returns start/stop for the tracking recorder:
 * stop() writes every buffered hit (called after the HTTP server has drained).
 */
import formbody from '@fastify/formbody';
import multipart from '@fastify/multipart';
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { loadSigner, type Signer } from '../../shared/signing.js';
import type { EventBus } from '../events.js';
import { adminGuard } from '../api/admin-auth.js';
import type { ProviderRouter } from '../api/sending/router.js';
import { SendService } from '../api/sending/send.js';
import { pageRoutes } from '../pages/routes.js';
import { archiveRoutes } from './archive.js';
import { doiRoutes } from './doi.js';
import { formAdminRoutes } from './forms-admin.js';
import { formRoutes } from './forms.js';
import { FORM_LIMITS } from './policy.js';
import { preferencesRoutes } from './preferences.js';
import type { PublicRateLimiter } from './rate-limit.js';
import { shareRoutes } from './share.js';
import { LinkSigner } from './tracked-links.js';
import { TrackingRecorder } from './tracking-recorder.js';
import { trackingRoutes } from './tracking.js';
import { unsubscribeRoutes } from './unsubscribe.js';

export interface PublicArea {
  limiter: PublicRateLimiter;
  recorder: TrackingRecorder;
  links: LinkSigner;
  signer: Signer;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function registerPublic(app: HttpApp, s: Services, providers: ProviderRouter, events: EventBus | undefined, limiter: PublicRateLimiter): Promise<PublicArea> {
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
  const org = s.config.ORGANIZATION_NAME;
  preferencesRoutes(app, { db: s.db, clock: s.clock, signer, limiter, events, organizationName: org });
  formAdminRoutes(app, { db: s.db, clock: s.clock, guard: adminGuard(s) });

  // Form bodies (urlencoded, multipart) are parsed only in this scope: the form endpoint,
  // one-click unsubscribe (the RFC 8058 POST is a form body) and the DOI confirmation (its
  // page posts a plain form when JavaScript is off).
  const sender = new SendService({ db: s.db, clock: s.clock, log: s.log.child({ area: 'forms' }), providers, events });
  await app.register(async (scope) => {
    await scope.register(formbody, { bodyLimit: FORM_LIMITS.maxBodyBytes });
    await scope.register(multipart, {
      limits: {
        fieldNameSize: FORM_LIMITS.maxFieldNameLength,
        fieldSize: FORM_LIMITS.maxBodyBytes,
        fields: FORM_LIMITS.maxFields,
        fileSize: FORM_LIMITS.maxBodyBytes,
        files: 1,
        parts: FORM_LIMITS.maxFields + 1,
      },
    });
    formRoutes(scope, { db: s.db, clock: s.clock, log: s.log, config: s.config, signer, limiter, sender, events });
    doiRoutes(scope, { db: s.db, clock: s.clock, signer, limiter, events, organizationName: org });
    unsubscribeRoutes(scope, { db: s.db, clock: s.clock, signer, limiter, events, organizationName: org, baseUrl: s.config.BASE_URL! });
  });

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
