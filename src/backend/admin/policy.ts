/**
 * Dashboard users, sessions and login throttling as data (docs/dashboard.md). Operators tune here.
 */

export const ROLES = ['admin', 'editor', 'viewer'] as const;
export type AdminRole = (typeof ROLES)[number];

/**
 * Which admin routes belong to which area (first matching prefix wins; matched against the
 * route pattern, e.g. `/admin/campaigns/:id/retry`). An area not listed is `settings`.
 */
export const ROUTE_AREAS: readonly { prefix: string; area: string }[] = [
  { prefix: '/admin/contacts/imports', area: 'imports' },
  { prefix: '/admin/contacts', area: 'contacts' },
  { prefix: '/admin/topics', area: 'topics' },
  { prefix: '/admin/forms', area: 'forms' },
  { prefix: '/admin/templates', area: 'templates' },
  { prefix: '/admin/share-links', area: 'templates' },
  { prefix: '/admin/campaigns', area: 'campaigns' },
  { prefix: '/admin/users', area: 'users' },
  { prefix: '/admin/audit-log', area: 'audit' },
  { prefix: '/admin/api-keys', area: 'api-keys' },
  { prefix: '/admin/app-passwords', area: 'api-keys' },
  { prefix: '/admin/webhooks', area: 'webhooks' },
  { prefix: '/admin/webhook-deliveries', area: 'webhooks' },
  { prefix: '/admin/session', area: 'session' },
];

/**
 * Areas each role may write (POST, PUT, PATCH, DELETE); every role reads every area.
 * `*` is every area. `session` (logging out) is open to every role.
 */
export const ROLE_WRITES: Record<AdminRole, readonly string[]> = {
  admin: ['*'],
  editor: ['contacts', 'topics', 'forms', 'templates', 'campaigns', 'imports', 'session'],
  viewer: ['session'],
};

export const ADMIN_SESSION = {
  cookieName: 'lm_session',
  /** A session unused for this long is over. */
  idleTimeoutMs: 2 * 60 * 60 * 1000,
  /** A session is over this long after login, however active. */
  absoluteTimeoutMs: 12 * 60 * 60 * 1000,
  /** last_seen_at is written at most this often per session (it only has to beat the idle timeout). */
  touchResolutionMs: 60_000,
  /** Random bytes of the session token and of the CSRF token. */
  tokenBytes: 32,
} as const;

/**
 * Login throttling, stored in PostgreSQL (every instance counts together). Failures are
 * counted in fixed windows per client IP and per account (lower-cased email, known or not,
 * so probing unknown addresses is throttled too). A locked key answers 429 with Retry-After
 * even for the right password.
 */
export const ADMIN_LOGIN = {
  windowMs: 15 * 60 * 1000,
  /** Failures from one IP within a window before it is locked out. */
  ipMaxFailures: 30,
  /** Failures for one account within a window before it is locked out. */
  accountMaxFailures: 5,
  /** How long a lockout lasts. */
  lockoutMs: 15 * 60 * 1000,
  passwordMinLength: 12,
  passwordMaxLength: 256,
} as const;

/**
 * scrypt parameters for new password hashes (OWASP 2025: N=2^17 r=8 p=1 is the top
 * recommendation; 2^15 keeps a login near 50 ms on a loaded 2-core host). Each hash records its
 * own parameters, so raising them here applies to new hashes and old ones keep verifying.
 */
export const PASSWORD_HASH = {
  N: 2 ** 15,
  r: 8,
  p: 1,
  keyLength: 64,
  saltBytes: 16,
  /** Refuse stored hashes asking for more than this (a tampered row must not exhaust memory). */
  maxN: 2 ** 20,
} as const;

export const AUDIT_LOG = {
  defaultLimit: 50,
  maxLimit: 200,
} as const;
