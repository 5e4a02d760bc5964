/** Templates, share links and campaigns (admin API) and the campaign fan-out, as one backend plugin. */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { adminGuard } from '../api/admin-auth.js';
import type { ProviderRouter } from '../api/sending/router.js';
import type { EventBus } from '../events.js';
import type { PublicArea } from '../public/index.js';
import { Fanout } from './fanout.js';
import { campaignRoutes } from './routes.js';
import { ScheduleSweeper } from './schedule.js';
import { templateRoutes } from './templates.js';
import { TransportResolver } from './transport.js';

export interface CampaignsArea {
  fanout: Fanout;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function registerCampaigns(
  app: HttpApp,
  s: Services,
  pub: Pick<PublicArea, 'signer' | 'links'>,
  providers: ProviderRouter,
  events?: EventBus,
): Promise<CampaignsArea> {
  const guard = adminGuard(s);
  if (s.config.NODE_ENV === 'production' && !/^https:/i.test(s.config.BASE_URL ?? '')) {
    s.log.warn({ baseUrl: s.config.BASE_URL }, 'BASE_URL is not https: List-Unsubscribe one-click (RFC 8058) needs an https URL; Gmail and Yahoo ignore http ones');
  }
  const baseUrl = s.config.BASE_URL!.replace(/\/+$/, '');
  const transports = new TransportResolver(providers);
  const fanout = new Fanout({
    db: s.db,
    clock: s.clock,
    log: s.log.child({ area: 'campaigns' }),
    signer: pub.signer,
    links: pub.links,
    transports,
    baseUrl,
    organizationName: s.config.ORGANIZATION_NAME,
    events,
  });
  templateRoutes(app, { db: s.db, clock: s.clock, baseUrl: s.config.BASE_URL!, guard });
  campaignRoutes(app, { db: s.db, clock: s.clock, guard, fanout, transports, baseUrl, organizationName: s.config.ORGANIZATION_NAME });
  const schedule = new ScheduleSweeper({ db: s.db, clock: s.clock, log: s.log.child({ area: 'campaigns' }), fanout, transports, organizationName: s.config.ORGANIZATION_NAME });
  app.decorate('campaignSchedule', schedule);
  return {
    fanout,
    async start() {
      await fanout.start();
      schedule.start();
    },
    async stop() {
      await schedule.stop();
      await fanout.stop();
      await transports.close();
    },
  };
}
