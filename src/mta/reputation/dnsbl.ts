/**
 * The one DNSBL lookup (mta.md → Blocklist lookup result), used by the monitor, the audit and
 * content screening's URI blocklist (uribl.ts, domains instead of addresses).
 * Node's c-ares resolver through DNS_SERVERS: it already speaks DNS over UDP with timeouts and
 * maps every rcode to an error code, so only the retry policy and the answer table are ours.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { Clock } from '../../shared/clock.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import type { MtaPolicy } from '../policy.js';

export type DnsblState = 'listed' | 'clean' | 'unknown';

/** Why a lookup is `unknown`. */
export type UnknownCause = 'timeout' | 'servfail' | 'refused' | 'reserved_code' | 'resolver_error';

export interface DnsblResult {
  ip: string;
  zone: string;
  state: DnsblState;
  /** The 127.x answers of a listing (or the reserved code of an `unknown`). */
  codes: string[];
  cause: UnknownCause | null;
  attempts: number;
  /** When the answer was taken (clock time of the last attempt). */
  at: number;
}

export type Sleep = (ms: number) => Promise<void>;
const realSleep: Sleep = (ms) => new Promise((r) => setTimeout(r, ms).unref());

/** `d.c.b.a.zone` for IPv4; the 32 reversed nibbles for IPv6 (RFC 5782 §2.4). */
export function dnsblName(ip: string, zone: string): string {
  if (isIPv4(ip)) return `${ip.split('.').reverse().join('.')}.${zone}`;
  if (!isIPv6(ip)) throw new Error(`not an IP address: ${ip}`);
  return `${expandIPv6(ip).split('').reverse().join('.')}.${zone}`;
}

/** The 32 hex digits of an IPv6 address (an embedded IPv4 tail included). */
export function expandIPv6(ip: string): string {
  let s = ip.toLowerCase();
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (v4) {
    const o = v4[1].split('.').map(Number);
    s = s.slice(0, -v4[1].length) + `${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const [head, tail] = s.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.map((g) => g.padStart(4, '0')).join('');
}

const RESERVED = /^127\.255\.255\.\d+$/;
const DOMAIN_RESERVED = /^127\.(255\.255\.\d+|0\.0\.1)$/;
const LISTED = /^127\.\d+\.\d+\.\d+$/;
const CAUSE: Record<string, UnknownCause> = { ETIMEOUT: 'timeout', ESERVFAIL: 'servfail', EREFUSED: 'refused' };

export interface DnsblResolverOptions {
  /** DNS_SERVERS entries (`host[:port]`); empty: the system's. */
  servers?: readonly string[];
  clock: Clock;
  /** The query timeout and the attempts with their backoff. */
  policy: Pick<MtaPolicy['reputation'], 'queryTimeoutMs' | 'attempts' | 'backoffBaseMs'>;
  /** Waits between attempts (tests pass one that advances a ManualClock). */
  sleep?: Sleep;
}

export class DnsblResolver {
  private readonly resolver: Resolver;
  private readonly sleep: Sleep;

  constructor(private readonly opts: DnsblResolverOptions) {
    // tries: 1 — the attempts and their backoff are ours, so they follow the policy and the clock.
    this.resolver = createResolver({ servers: opts.servers, timeoutMs: opts.policy.queryTimeoutMs, tries: 1 });
    this.sleep = opts.sleep ?? realSleep;
  }

  /** One address on one zone, per the answer table: never throws. */
  async lookup(ip: string, zone: string): Promise<DnsblResult> {
    return { ip, zone, ...(await this.query(dnsblName(ip, zone), RESERVED)) };
  }

  /**
   * One domain on a domain (URI) blocklist, queried as `<domain>.<zone>` (Spamhaus DBL, SURBL,
   * URIBL): the same table, except that 127.0.0.1 is the list refusing the query too (SURBL's and
   * URIBL's "access blocked"; RFC 5782 §2.1 keeps it out of listings). `ip` holds the domain.
   */
  async lookupDomain(domain: string, zone: string): Promise<DnsblResult> {
    return { ip: domain, zone, ...(await this.query(`${domain}.${zone}`, DOMAIN_RESERVED)) };
  }

  private async query(name: string, reservedCodes: RegExp): Promise<Omit<DnsblResult, 'ip' | 'zone'>> {
    const { attempts, backoffBaseMs } = this.opts.policy;
    let cause: UnknownCause = 'resolver_error';
    for (let n = 1; ; n++) {
      const out = (state: DnsblState, codes: string[], c: UnknownCause | null) => ({ state, codes, cause: c, attempts: n, at: this.opts.clock.now() });
      try {
        const answers = await this.resolver.resolve4(name);
        const reserved = answers.filter((a) => reservedCodes.test(a));
        // A reserved code is the list refusing us (policy, rate limit): asking again won't help.
        if (reserved.length) return out('unknown', reserved, 'reserved_code');
        const codes = answers.filter((a) => LISTED.test(a)).sort();
        if (codes.length) return out('listed', codes, null);
        cause = 'resolver_error'; // an answer outside 127/8 is not a DNSBL answer
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? '';
        if (code === 'ENOTFOUND' || code === 'ENODATA') return out('clean', [], null);
        cause = CAUSE[code] ?? 'resolver_error';
      }
      if (n >= attempts) return out('unknown', [], cause);
      await this.sleep(backoffBaseMs * 2 ** (n - 1));
    }
  }

  cancel(): void {
    this.resolver.cancel();
  }
}
