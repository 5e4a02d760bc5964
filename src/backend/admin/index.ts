/** Dashboard accounts as one backend plugin: the audit hook (every admin route) and the account routes. */
import type { HttpApp } from '../../shared/http.js';
import type { Services } from '../../shared/services.js';
import { adminGuard } from '../api/admin-auth.js';
import { auditHook } from './audit.js';
import { adminAccountRoutes } from './routes.js';

/** Registered first: the audit hook is on the root, so it sees every area's admin routes. */
export function registerAdmin(app: HttpApp, s: Services): void {
  app.addHook('onSend', auditHook({ db: s.db, clock: s.clock, log: s.log }));
  adminAccountRoutes(app, {
    config: s.config,
    db: s.db,
    clock: s.clock,
    guard: adminGuard(s),
    secureCookies: /^https:/i.test(s.config.BASE_URL ?? ''),
  });
}
