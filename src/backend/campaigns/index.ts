/** Templates, share links and campaigns (admin API) and the campaign fan-out, as one backend plugin. */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { adminGuard } from '../api/admin-auth.js';
import { templateRoutes } from './templates.js';

export interface CampaignsArea {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function registerCampaigns(app: HttpApp, s: Services): Promise<CampaignsArea> {
  const guard = adminGuard(() => s.config.ADMIN_TOKEN);
  templateRoutes(app, { db: s.db, clock: s.clock, baseUrl: s.config.BASE_URL!, guard });
  return {
    async start() {},
    async stop() {},
  };
}
