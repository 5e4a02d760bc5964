/**
 * The dashboard's top-level paths: the server answers them with index.html (SPA fallback)
 * and the client (src/dashboard/main.tsx) routes on the same names. None of them is a prefix used by the API or the public
 * pages (test/backend/ui/dashboard.test.ts checks): webhooks live at /webhook-endpoints since
 * /webhooks/* receives provider callbacks.
 */
export const DASHBOARD_SECTIONS = [
  'login',
  'setup',
  'overview',
  'contacts',
  'topics',
  'templates',
  'campaigns',
  'transactional',
  'webhook-endpoints',
  'api-keys',
  'deliverability',
  'settings',
  'users',
] as const;
export type DashboardSection = (typeof DASHBOARD_SECTIONS)[number];

export const DASHBOARD_ASSET_PREFIX = '/dashboard-assets';
