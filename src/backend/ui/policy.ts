/** The dashboard routes' numbers (src/backend/ui/routes.ts). */
export const DASHBOARD_LIMITS = {
  /** Overview window, in UTC days. */
  defaultStatsDays: 30,
  maxStatsDays: 366,
  /** Page sizes of the dashboard's own lists. */
  defaultPage: 25,
  maxPage: 100,
  /** Events shown on one send's timeline. */
  maxTimeline: 200,
  /** The danger lines drawn on the overview: complaint and bounce rates (decisions: 0.3 %, 5 %). */
  dangerRates: { complaint: 0.003, bounce: 0.05 },
} as const;

/** Calls the deliverability screens make to the MTA through the backend. */
export const DASHBOARD_MTA = {
  timeoutMs: 10_000,
} as const;
