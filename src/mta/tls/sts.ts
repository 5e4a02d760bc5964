/**
 * MTA-STS (RFC 8461): the recipient domain's policy, looked up before delivery.
 *
 * - The `_mta-sts.<domain>` TXT record is read through DNS_SERVERS; when its id differs from
 *   the cached policy's, `https://mta-sts.<domain>/.well-known/mta-sts.txt` is fetched with
 *   the SSRF-guarded client (validated certificate, no redirects, size cap, deadline).
 * - The cache is the `mta_sts_policies` table, shared by the fleet: a policy is kept at least
 *   TRANSPORT.stsMinCacheMs and up to its max_age; no policy (or a failed fetch without a
 *   known policy) is remembered TRANSPORT.stsNegativeCacheMs. A known policy is used while
 *   DNS or the policy host fail, until it expires (RFC 8461 §5.1).
 * - Any lookup failure without a known policy means opportunistic TLS, with the failure kept
 *   for TLS-RPT (`sts-policy-fetch-error`, `sts-policy-invalid`, `sts-webpki-invalid`).
 *
 * mailauth parses the policy file; its MX matcher is not used because it lets `*.example.com`
 * match `a.b.example.com`, which RFC 8461 §4.1 forbids (the wildcard is one label).
 */
import { parsePolicy } from 'mailauth/lib/mta-sts.js';
import type { Clock } from '../../shared/clock.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { NetError, SafeHttpClient } from '../../shared/net/client.js';
import { createLookup } from '../../shared/net/resolve.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import { TargetRefused } from '../../shared/net/target.js';
import { DELIVERY } from '../delivery/settings.js';
import { TRANSPORT } from './settings.js';

export type StsMode = 'enforce' | 'testing' | 'none';

export interface StsPolicy {
  id: string;
  mode: StsMode;
  /** MX patterns, lower case (`mx.example.com`, `*.example.com`). */
  mx: string[];
  /** Seconds. */
  maxAge: number;
  /** The policy file's text, as fetched (TLS-RPT `policy-string`). */
  text: string;
}

/** TLS-RPT result types a policy lookup can produce (RFC 8460 §4.3.2.1). */
export type StsFailureType = 'sts-policy-fetch-error' | 'sts-policy-invalid' | 'sts-webpki-invalid';

export interface StsLookup {
  /** The policy to apply; null: opportunistic TLS (no policy, or none could be had). */
  policy: StsPolicy | null;
  /** Why a policy the domain announces could not be fetched (reported, not enforced). */
  failure?: { type: StsFailureType; detail: string };
  /** Where the answer came from (logs, tests). */
  source: 'cache' | 'fetched' | 'renewed' | 'stale-dns' | 'negative' | 'none';
}

export interface StsResolverOptions {
  db: Db;
  clock: Clock;
  log: Logger;
  /** DNS_SERVERS (TXT record and the policy host's address). */
  dnsServers?: readonly string[];
  /** Extra CAs trusted for the policy host (tests' CA); the system's are always trusted. */
  ca?: string | Buffer | (string | Buffer)[];
  /** Hosts exempt from the private-address rule (WEBHOOK_ALLOW_HOSTS; tests' loopback hosts). */
  allowHosts?: readonly string[];
  /** HTTPS port of the policy host: 443 (RFC 8461 §3.3); tests use a free port. */
  policyPort?: number;
}

class StsFetchError extends Error {
  constructor(
    readonly type: StsFailureType,
    message: string,
  ) {
    super(message);
  }
}

/** RFC 8461 §4.1: exact name, or `*.` matching exactly one leftmost label. */
export function mxMatches(mxHost: string, patterns: readonly string[]): boolean {
  const h = mxHost.toLowerCase().replace(/\.$/, '');
  return patterns.some((raw) => {
    const p = raw.toLowerCase().replace(/\.$/, '');
    if (!p.startsWith('*.')) return p === h;
    const dot = h.indexOf('.');
    return dot > 0 && h.slice(dot + 1) === p.slice(2);
  });
}

/** The `id` of a `v=STSv1` TXT record, or null when there is none (RFC 8461 §3.1). */
export function parseStsRecord(txt: string[][]): string | null | 'multiple' {
  const recs = txt.map((parts) => parts.join('')).filter((t) => /^v=STSv1\s*(;|$)/.test(t));
  if (recs.length === 0) return null;
  if (recs.length > 1) return 'multiple';
  const m = /(?:^|;)\s*id=([A-Za-z0-9]{1,32})\s*(?:;|$)/.exec(recs[0]);
  return m ? m[1] : null;
}

interface Row {
  policy_id: string | null;
  mode: StsMode | null;
  mx: string[];
  max_age: number | null;
  policy_text: string | null;
  checked_at: Date;
  expires_at: Date;
  failure: string | null;
}

export class StsResolver {
  /**
   * Per-instance memo of answers the table gave, so a busy domain costs one query per
   * TRANSPORT.stsMemoMs instead of one per message; never kept past the row's own next check.
   */
  private readonly memo = new Map<string, { until: number; answer: StsLookup }>();
  private readonly resolver: Resolver;
  private readonly http: SafeHttpClient;
  private readonly port: number;

  constructor(private readonly o: StsResolverOptions) {
    this.resolver = createResolver({ servers: o.dnsServers, timeoutMs: DELIVERY.dnsTimeoutMs, tries: DELIVERY.dnsTries });
    this.http = new SafeHttpClient({ lookup: createLookup(o.dnsServers), clock: o.clock, ca: o.ca, allowHosts: o.allowHosts, maxSocketsPerHost: 2 });
    this.port = o.policyPort ?? 443;
  }

  /** The policy for mail to `domain` now. Never throws: a failure is opportunistic TLS. */
  async lookup(domain: string): Promise<StsLookup> {
    const d = domain.toLowerCase().replace(/\.$/, '');
    const hit = this.memo.get(d);
    if (hit && hit.until > this.o.clock.now()) return hit.answer;
    try {
      return await this.resolve(d);
    } catch (err) {
      this.o.log.warn({ err, domain: d }, 'MTA-STS lookup failed; opportunistic TLS');
      return { policy: null, source: 'none' };
    }
  }

  private async resolve(domain: string): Promise<StsLookup> {
    const now = this.o.clock.now();
    const row = await this.read(domain);
    const known = row && row.policy_id && row.expires_at.getTime() > now ? toPolicy(row) : null;
    if (known && row!.checked_at.getTime() + TRANSPORT.stsMinCacheMs > now) {
      return this.remember(domain, { policy: known, source: 'cache' }, Math.min(row!.checked_at.getTime() + TRANSPORT.stsMinCacheMs, row!.expires_at.getTime()));
    }
    if (row && !row.policy_id && row.expires_at.getTime() > now) return this.remember(domain, { policy: null, source: 'negative', ...negativeFailure(row) }, row.expires_at.getTime());

    let id: string | null | 'multiple';
    try {
      id = parseStsRecord(await this.resolver.resolveTxt(`_mta-sts.${domain}`));
    } catch (err) {
      const c = (err as NodeJS.ErrnoException).code;
      if (c !== 'ENODATA' && c !== 'ENOTFOUND') {
        // DNS outage: a known policy stays in force until it expires (RFC 8461 §5.1).
        if (known) return { policy: known, source: 'stale-dns' };
        return { policy: null, source: 'none' };
      }
      id = null;
    }
    if (id === null || id === 'multiple') {
      // RFC 8461 §5.1: a record gone does not end a cached policy before it expires.
      if (known) return { policy: known, source: 'stale-dns' };
      await this.writeNegative(domain, now, 'no-policy');
      return { policy: null, source: 'negative' };
    }
    if (known && known.id === id) {
      await this.o.db.query(
        `UPDATE mta_sts_policies SET checked_at = $2, expires_at = $3 WHERE domain = $1`,
        [domain, new Date(now), new Date(now + cacheMs(known.maxAge))],
      );
      return { policy: known, source: 'renewed' };
    }
    let policy: StsPolicy;
    try {
      policy = await this.fetch(domain, id);
    } catch (err) {
      const f = err instanceof StsFetchError ? err : new StsFetchError('sts-policy-fetch-error', (err as Error).message);
      this.o.log.warn({ domain, type: f.type, detail: f.message }, 'MTA-STS policy could not be fetched');
      // A known policy outlives a failing policy host as it outlives DNS.
      if (known) return { policy: known, source: 'stale-dns', failure: { type: f.type, detail: f.message } };
      await this.writeNegative(domain, now, `${f.type}: ${f.message}`);
      return { policy: null, source: 'negative', failure: { type: f.type, detail: f.message } };
    }
    await this.o.db.query(
      `INSERT INTO mta_sts_policies (domain, policy_id, mode, mx, max_age, policy_text, fetched_at, checked_at, expires_at, failure)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, NULL)
       ON CONFLICT (domain) DO UPDATE SET policy_id = $2, mode = $3, mx = $4, max_age = $5, policy_text = $6,
         fetched_at = $7, checked_at = $7, expires_at = $8, failure = NULL`,
      [domain, policy.id, policy.mode, policy.mx, policy.maxAge, policy.text, new Date(now), new Date(now + cacheMs(policy.maxAge))],
    );
    return { policy, source: 'fetched' };
  }

  private remember(domain: string, answer: StsLookup, rowUntil: number): StsLookup {
    this.memo.set(domain, { until: Math.min(this.o.clock.now() + TRANSPORT.stsMemoMs, rowUntil), answer });
    // Bounded like the MX cache: drop the oldest entry.
    if (this.memo.size > 100_000) this.memo.delete(this.memo.keys().next().value as string);
    return answer;
  }

  private async fetch(domain: string, id: string): Promise<StsPolicy> {
    const url = `https://mta-sts.${domain}${this.port === 443 ? '' : `:${this.port}`}/.well-known/mta-sts.txt`;
    let res;
    try {
      res = await this.http.request(url, {
        timeoutMs: TRANSPORT.stsFetchTimeoutMs,
        maxBodyKept: TRANSPORT.stsMaxBodyBytes + 1,
        maxBodyRead: TRANSPORT.stsMaxBodyBytes + 1,
      });
    } catch (err) {
      if (err instanceof NetError && err.kind === 'tls') throw new StsFetchError('sts-webpki-invalid', `${url}: ${err.message}`);
      if (err instanceof TargetRefused) throw new StsFetchError('sts-policy-fetch-error', `${url}: ${err.message}`);
      throw new StsFetchError('sts-policy-fetch-error', `${url}: ${(err as Error).message}`);
    }
    // RFC 8461 §3.3: redirects are not followed; anything but 200 is a fetch error.
    if (res.status !== 200) throw new StsFetchError('sts-policy-fetch-error', `${url}: HTTP ${res.status}`);
    if (res.bodyTruncated || Buffer.byteLength(res.body) > TRANSPORT.stsMaxBodyBytes) {
      throw new StsFetchError('sts-policy-invalid', `${url}: policy larger than ${TRANSPORT.stsMaxBodyBytes} bytes`);
    }
    const type = String(res.headers['content-type'] ?? '');
    if (!/^text\/plain\s*(;|$)/i.test(type)) throw new StsFetchError('sts-policy-invalid', `${url}: Content-Type ${type || 'missing'}, not text/plain`);
    let parsed;
    try {
      parsed = parsePolicy(res.body);
    } catch (err) {
      throw new StsFetchError('sts-policy-invalid', `${url}: ${(err as Error).message}`);
    }
    const maxAge = Math.min(parsed.maxAge ?? 0, TRANSPORT.stsMaxAgeLimitS);
    return { id, mode: parsed.mode as StsMode, mx: (parsed.mx ?? []).map((m: string) => m.toLowerCase()), maxAge, text: res.body };
  }

  private async read(domain: string): Promise<Row | undefined> {
    const r = await this.o.db.query<Row>(
      `SELECT policy_id, mode, mx, max_age, policy_text, checked_at, expires_at, failure FROM mta_sts_policies WHERE domain = $1`,
      [domain],
    );
    return r.rows[0];
  }

  /** A negative entry never replaces an unexpired policy (another instance may have just fetched one). */
  private async writeNegative(domain: string, now: number, failure: string): Promise<void> {
    await this.o.db.query(
      `INSERT INTO mta_sts_policies (domain, policy_id, mode, checked_at, expires_at, failure)
       VALUES ($1, NULL, NULL, $2, $3, $4)
       ON CONFLICT (domain) DO UPDATE SET policy_id = NULL, mode = NULL, mx = '{}', max_age = NULL, policy_text = NULL,
         fetched_at = NULL, checked_at = $2, expires_at = $3, failure = $4
       WHERE mta_sts_policies.policy_id IS NULL OR mta_sts_policies.expires_at <= $2`,
      [domain, new Date(now), new Date(now + TRANSPORT.stsNegativeCacheMs), failure],
    );
  }
}

function cacheMs(maxAgeS: number): number {
  return Math.max(maxAgeS * 1000, TRANSPORT.stsMinCacheMs);
}

function toPolicy(row: Row): StsPolicy {
  return { id: row.policy_id!, mode: row.mode ?? 'none', mx: row.mx, maxAge: row.max_age ?? 0, text: row.policy_text ?? '' };
}

function negativeFailure(row: Row): Pick<StsLookup, 'failure'> {
  const m = row.failure ? /^(sts-[a-z-]+): (.*)$/s.exec(row.failure) : null;
  return m ? { failure: { type: m[1] as StsFailureType, detail: m[2] } } : {};
}
