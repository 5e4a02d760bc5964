import { parseMailbox } from './mail/address.js';
/**
 * Configuration: one table of every environment variable, its parser and default.
 * A bad value names the variable and what it expects; loadConfig throws ConfigError and
 * the CLI exits non-zero. Later capabilities add their variables to SPEC below.
 * A loaded configuration is deep-frozen: what differs per process (first-boot secrets, the
 * peers' URLs of role all) is passed in before or beside it, never written into it.
 */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

type Parser<T> = { parse(raw: string, name: string): T; expects: string };

const str: Parser<string> = { parse: (v) => v, expects: 'a string' };
const port: Parser<number> = {
  expects: 'a TCP port number from 0 to 65535',
  parse(v, name) {
    const n = Number(v);
    if (!/^\d+$/.test(v) || n > 65535) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return n;
  },
};
const posInt: Parser<number> = {
  expects: 'a positive whole number',
  parse(v, name) {
    const n = Number(v);
    if (!/^\d+$/.test(v) || n < 1) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return n;
  },
};
const nonNegInt: Parser<number> = {
  expects: 'a whole number (0 or more)',
  parse(v, name) {
    if (!/^\d+$/.test(v)) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return Number(v);
  },
};
const num: Parser<number> = {
  expects: 'a number',
  parse(v, name) {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n)) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return n;
  },
};
const bool: Parser<boolean> = {
  expects: 'true or false',
  parse(v, name) {
    const s = v.trim().toLowerCase();
    if (['true', '1', 'yes', 'on'].includes(s)) return true;
    if (['false', '0', 'no', 'off'].includes(s)) return false;
    throw new Error(`${name} must be ${this.expects}, got "${v}"`);
  },
};
const url = (protocols: string[]): Parser<string> => ({
  expects: `a URL (${protocols.join(', ')})`,
  parse(v, name) {
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw new Error(`${name} must be ${this.expects}, got an unparseable value`);
    }
    if (!protocols.includes(u.protocol.replace(/:$/, ''))) {
      throw new Error(`${name} must be ${this.expects}, got protocol "${u.protocol}"`);
    }
    return v.replace(/\/+$/, '');
  },
});
const oneOf = <T extends string>(values: readonly T[]): Parser<T> => ({
  expects: `one of ${values.join(', ')}`,
  parse(v, name) {
    if (!values.includes(v as T)) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return v as T;
  },
});
const list: Parser<string[]> = {
  expects: 'a comma-separated list',
  parse: (v) =>
    v
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
};

/** One mailbox of the address grammar (src/shared/mail/address.ts): checked at start, not at the first send. */
const mailbox: Parser<string> = {
  expects: 'one mailbox, a@example.com or Name <a@example.com>',
  parse(v, name) {
    if (!parseMailbox(v)) throw new Error(`${name} must be ${this.expects}, got "${v}"`);
    return v.trim();
  },
};

/** Fastify's trustProxy: true/false, a hop count, or a comma-separated list of addresses/CIDRs. */
const trustProxy: Parser<boolean | number | string[]> = {
  expects: 'true, false, a number of hops, or a comma-separated list of proxy addresses or CIDRs',
  parse(v) {
    const s = v.trim().toLowerCase();
    if (s === 'true' || s === 'false') return s === 'true';
    if (/^\d+$/.test(s)) return Number(s);
    return list.parse(v, 'TRUST_PROXY');
  },
};

export const EMAIL_PROVIDERS = ['mta', 'ses', 'resend', 'smtp', 'mandrill'] as const;
export const ROLES = ['backend', 'mta', 'all'] as const;
export type Role = (typeof ROLES)[number];

interface VarSpec<T> {
  parser: Parser<T>;
  default?: T;
  secret?: boolean;
  doc: string;
}
function v<T>(parser: Parser<T>, doc: string, extra: { default: T; secret?: boolean }): VarSpec<T> & { default: T };
function v<T>(parser: Parser<T>, doc: string, extra?: { secret?: boolean }): VarSpec<T>;
function v<T>(parser: Parser<T>, doc: string, extra: { default?: T; secret?: boolean } = {}): VarSpec<T> {
  return { parser, doc, ...extra };
}

export const SPEC = {
  NODE_ENV: v(oneOf(['development', 'production', 'test'] as const), 'runtime mode; production enforces required secrets', { default: 'development' }),
  LOG_LEVEL: v(oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const), 'log level', { default: 'info' }),
  HOST: v(str, 'address the HTTP servers listen on', { default: '0.0.0.0' }),
  TRUST_PROXY: v(trustProxy, 'proxies whose X-Forwarded-For is believed (client IP for rate limits)', { default: false }),
  PORT: v(port, 'backend HTTP port', { default: 3000 }),
  MTA_PORT: v(port, 'MTA HTTP port', { default: 3001 }),
  DATA_DIR: v(str, 'embedded PostgreSQL data and first-boot secrets', { default: './data' }),
  DATABASE_URL: v(url(['postgres', 'postgresql']), 'external PostgreSQL 15+ (unset: embedded)', { secret: true }),
  REDIS_URL: v(url(['redis', 'rediss']), 'Redis for shared coordination (unset: process memory)', { secret: true }),
  BASE_URL: v(url(['http', 'https']), 'public base URL of the backend (links in emails)'),
  ORGANIZATION_NAME: v(str, 'display name of the organization', { default: 'Lettermill' }),
  ADMIN_TOKEN: v(str, 'Bearer token of the admin API', { secret: true }),
  EMAIL_PROVIDER: v(oneOf(EMAIL_PROVIDERS), 'sending provider (unset: sends are refused)'),
  EMAIL_FROM: v(mailbox, 'sender of system emails such as double opt-in confirmations (unset: "ORGANIZATION_NAME <no-reply@BASE_URL host>", or no-reply@ the machine\'s host name when BASE_URL names an IP address or localhost)'),
  SMTP_RELAY_URL: v(url(['smtp', 'smtps']), 'EMAIL_PROVIDER=smtp: the relay, smtp[s]://user:password@host:port', { secret: true }),
  // Provider APIs (docs/api.md → Sending providers). Endpoints default to the providers' own.
  AWS_ACCESS_KEY_ID: v(str, 'EMAIL_PROVIDER=ses (or a ses route): AWS access key id', { secret: true }),
  AWS_SECRET_ACCESS_KEY: v(str, 'EMAIL_PROVIDER=ses: AWS secret access key', { secret: true }),
  AWS_SESSION_TOKEN: v(str, 'EMAIL_PROVIDER=ses: AWS session token of temporary credentials', { secret: true }),
  AWS_REGION: v(str, 'EMAIL_PROVIDER=ses: the SES region (SES_REGION wins when both are set)'),
  SES_REGION: v(str, 'EMAIL_PROVIDER=ses: the SES region, when it differs from AWS_REGION'),
  SES_ENDPOINT: v(url(['http', 'https']), 'SES v2 API endpoint (unset: https://email.<region>.amazonaws.com)'),
  SES_CONFIGURATION_SET: v(str, 'SES configuration set named on every send (its event destination feeds /webhooks/ses)'),
  RESEND_API_KEY: v(str, 'EMAIL_PROVIDER=resend: API key, re_...', { secret: true }),
  RESEND_API_URL: v(url(['http', 'https']), 'Resend API endpoint', { default: 'https://api.resend.com' }),
  MANDRILL_API_KEY: v(str, 'EMAIL_PROVIDER=mandrill: API key', { secret: true }),
  MANDRILL_API_URL: v(url(['http', 'https']), 'Mandrill API endpoint', { default: 'https://mandrillapp.com/api/1.0' }),
  ORGANIZATION_ID: v(str, 'organization id the backend sends under (MTA organizationId: circuit breaker and limits)', { default: 'default' }),
  MTA_URL: v(url(['http', 'https']), 'where the backend reaches the MTA'),
  MTA_API_KEY: v(str, 'MTA master key', { secret: true }),
  MTA_WEBHOOK_URL: v(url(['http', 'https']), 'where the MTA posts its events'),
  MTA_WEBHOOK_SECRET: v(str, 'HMAC secret shared by the MTA and the backend', { secret: true }),
  RESEND_WEBHOOK_SECRET: v(str, 'Resend (Svix) webhook secret, whsec_...', { secret: true }),
  RELAY_WEBHOOK_SECRET: v(str, 'generic relay webhook secret', { secret: true }),
  MANDRILL_WEBHOOK_KEY: v(str, 'Mandrill webhook key', { secret: true }),
  MANDRILL_WEBHOOK_URL: v(str, 'webhook URL exactly as registered in Mandrill (signed); default ${BASE_URL}/webhooks/mandrill'),
  SES_SNS_TOPIC_ARNS: v(list, 'SNS topic ARNs whose SES notifications /webhooks/ses accepts (unset: route answers 503)'),
  BOUNCE_VERP_KEY: v(str, 'VERP and CFBL token key', { secret: true }),
  BOUNCE_HOST: v(str, 'host part of VERP and CFBL addresses'),
  INBOUND_SMTP_PORT: v(port, "the MTA's inbound SMTP listener (bounces, feedback reports, routed and mailbox mail); 0: any free port", { default: 25 }),
  INBOUND_SMTP_HOST: v(str, 'address the inbound SMTP listener binds (unset: all addresses)'),
  INBOUND_TLS_CERT: v(str, 'PEM certificate file; with INBOUND_TLS_KEY, STARTTLS is offered on the inbound listener'),
  INBOUND_TLS_KEY: v(str, 'PEM private key file of INBOUND_TLS_CERT'),
  INBOUND_MAX_MESSAGE_MB: v(posInt, 'inbound message size limit in MB, announced in EHLO SIZE', { default: 25 }),
  INBOUND_DMARC_REJECT: v(bool, 'refuse routed and mailbox mail that fails DMARC under p=reject with 550 5.7.1 (docs/inbound.md); false: accept it, marked', { default: true }),
  SUBMISSION_ENABLED: v(bool, 'the SMTP submission listener (docs/submission.md); needs SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY', { default: false }),
  SUBMISSION_PORT: v(port, 'SMTP submission port (STARTTLS); 0: any free port', { default: 587 }),
  SUBMISSION_TLS_PORT: v(port, 'SMTP submission with implicit TLS (465); unset: off'),
  SUBMISSION_HOST: v(str, 'address the submission listener binds (unset: all addresses)'),
  SUBMISSION_TLS_CERT: v(str, 'PEM certificate file of the submission listener'),
  SUBMISSION_TLS_KEY: v(str, 'PEM private key file of SUBMISSION_TLS_CERT'),
  DNS_SERVERS: v(list, 'resolvers host[:port] for every MTA DNS lookup (unset: system)'),
  // Reputation guard (docs/reputation.md). Every lookup goes through DNS_SERVERS.
  DNSBL_MONITOR: v(bool, 'blocklist monitoring: addresses confirmed listed on the critical zone leave the pool; never observed or unknown keep sending (unset: on in production, off otherwise; false: no sweeps, no gating)'),
  DNSBL_CRITICAL_ZONE: v(str, 'blocklist zone whose listing quarantines a sending IP', { default: 'zen.spamhaus.org' }),
  DNSBL_WARNING_ZONES: v(list, 'advisory blocklist zones of the monitor and the audit', { default: ['b.barracudacentral.org', 'bl.spamcop.net'] }),
  DNSBL_AUDIT_ZONES: v(list, 'further blocklist zones the audit asks', { default: ['psbl.surriel.com', 'all.s5h.net', 'ix.dnsbl.manitu.net'] }),
  SPAMHAUS_DQS_KEY: v(str, 'Spamhaus Data Query Service key (audit feed; unset: skipped)', { secret: true }),
  SPAMHAUS_DQS_ZONE: v(str, 'DQS zone, queried as <key>.<zone>', { default: 'zen.dq.spamhaus.net' }),
  ABUSEIPDB_API_KEY: v(str, 'AbuseIPDB API key (audit feed; unset: skipped)', { secret: true }),
  ABUSEIPDB_URL: v(url(['http', 'https']), 'AbuseIPDB check endpoint', { default: 'https://api.abuseipdb.com/api/v2/check' }),
  AUDIT_PROBE_MX_HOSTS: v(list, 'MX hosts host[:port] the audit opens TCP/25 to from each sending IP', {
    default: ['gmail-smtp-in.l.google.com', 'mta5.am0.yahoodns.net', 'outlook-com.olc.protection.outlook.com'],
  }),
  MTA_FAILOVER_RELAY_URL: v(url(['smtp', 'smtps']), "relay that takes a pool's traffic while the whole pool is listed on the critical zone", { secret: true }),
  MTA_DELIVERY_PORT: v(port, 'remote SMTP port for delivery', { default: 25 }),
  MTA_POOLS: v(str, 'sending IPs by pool: pool:ip@ehlo,ip@ehlo;pool:...'),
  WEBHOOK_ALLOW_HOSTS: v(list, 'hosts exempt from the outbound private-address rule', { default: [] }),
  WORKER_CONCURRENCY: v(posInt, 'MTA delivery groups processed in parallel', { default: 50 }),
  CONTENT_SCREENING_ENABLED: v(bool, 'pipeline phase 1 on/off', { default: true }),
  CONTENT_MAX_SIZE_KB: v(posInt, 'largest HTML body accepted by screening', { default: 500 }),
  SPAMSCORER_URL: v(url(['http', 'https']), 'optional spam scorer'),
  SPAMSCORER_REJECT_THRESHOLD: v(num, 'scorer score above which a message is screened', { default: 15 }),
  SMTP_POOL_GLOBAL_MAX_PER_HOST: v(posInt, 'connections per MX host across all instances', { default: 10 }),
  DKIM_KEYS: v(str, 'DKIM keys seeded at start (JSON array of {domain, selector, privateKey})', { secret: true }),
  QUEUE_MAX_DEPTH: v(posInt, 'pending MTA jobs above which POST /send answers 429', { default: 1_000_000 }),
  CONTENT_URL_BLOCKLIST: v(list, 'domains whose links screen a message out (adds to the MTA policy list)', { default: [] }),
  CONTENT_URIBL: v(bool, 'content screening asks CONTENT_URIBL_ZONES (DNS domain blocklists) about the domains of every link, failing open (unset: on in production, off otherwise)'),
  CONTENT_URIBL_ZONES: v(list, 'DNS URI blocklist zones of content screening, asked as <domain>.<zone> through DNS_SERVERS', { default: ['dbl.spamhaus.org', 'multi.surbl.org'] }),
  MTA_WARMED_IPS: v(list, 'sending IPs that are already warm (no warming cap)', { default: [] }),
  MTA_TLSRPT_FROM: v(str, 'sender of TLS-RPT mailto: reports; its domain needs a DKIM key (unset: mailto: endpoints are skipped)'),
  MTA_TLSRPT_RUA: v(list, 'TLS-RPT rua= endpoints (mailto:/https:) emitted in the records of every sending domain (unset: no TLS-RPT record)'),
  CLAMD_SOCKET: v(str, 'ClamAV daemon (clamd) Unix socket for /scan/attachment and submitted attachments (wins over CLAMD_HOST)'),
  CLAMD_HOST: v(str, 'ClamAV daemon (clamd) host, with CLAMD_PORT; unset with CLAMD_SOCKET unset: no malware scan (fail open)'),
  CLAMD_PORT: v(posInt, 'ClamAV daemon (clamd) TCP port', { default: 3310 }),
  SCAN_ALLOWED_EXTENSIONS: v(list, 'attachment extensions /scan/attachment allows (default: the MTA policy list, docs/mta.md)', { default: [] }),
  // The HTTP edge of both servers (docs/api.md → Input policy). A client that does not finish
  // in time gets 408 and the connection is closed (at most ~1.5 s after the deadline).
  HTTP_HEADERS_TIMEOUT_MS: v(posInt, 'the request line and headers must arrive within this many ms (408 otherwise)', { default: 15_000 }),
  HTTP_BODY_TIMEOUT_MS: v(posInt, 'the whole request, body included, must arrive within this many ms of its first byte (408 otherwise)', { default: 30_000 }),
  HTTP_REQUEST_TIMEOUT_MS: v(posInt, 'a route must answer within this many ms of being matched (503 request_timeout otherwise)', { default: 60_000 }),
  HTTP_KEEPALIVE_TIMEOUT_MS: v(posInt, 'an idle keep-alive connection is closed after this many ms', { default: 10_000 }),
  HTTP_MAX_CONNECTIONS_PER_CLIENT: v(nonNegInt, 'open connections per client address (IPv6: per /64) on each server; 0: no limit', { default: 512 }),
  PUBLIC_RATE_LIMITS: v(str, 'public endpoint rate-limit overrides: name=burst/perMinute,... (docs/public-endpoints.md)'),
} as const;

type SpecOf = typeof SPEC;
type ValueOf<S> = S extends VarSpec<infer T> ? T : never;
type HasDefault<S> = S extends { default: any } ? true : false;

type Frozen<T> = T extends readonly (infer E)[] ? readonly E[] : T;

export type Config = {
  readonly [K in keyof SpecOf]: Frozen<HasDefault<SpecOf[K]> extends true ? ValueOf<SpecOf[K]> : ValueOf<SpecOf[K]> | undefined>;
};

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const out: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [name, spec] of Object.entries(SPEC) as [string, VarSpec<unknown>][]) {
    const raw = env[name];
    if (raw === undefined || raw === '') {
      out[name] = spec.default;
      continue;
    }
    try {
      out[name] = spec.parser.parse(raw, name);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  if (problems.length) throw new ConfigError(problems);
  return deepFreeze(out) as Config;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** Names of variables whose values must never be printed. */
export const SECRET_NAMES: ReadonlySet<string> = new Set(
  Object.entries(SPEC)
    .filter(([, s]) => (s as VarSpec<unknown>).secret)
    .map(([n]) => n),
);

/** Every variable with its expectation, for `lettermill help` and the README. */
export function describeConfig(): { name: string; expects: string; default?: unknown; doc: string }[] {
  return Object.entries(SPEC).map(([name, s]) => {
    const spec = s as VarSpec<unknown>;
    return { name, expects: spec.parser.expects, default: spec.default, doc: spec.doc };
  });
}
