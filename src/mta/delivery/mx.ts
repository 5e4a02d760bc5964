/**
 * MX routing (RFC 5321 §5.1, RFC 7505) through the resolvers of DNS_SERVERS, cached.
 * Node's resolver reports TTLs for A/AAAA but not for MX, so MX answers are kept for
 * DELIVERY.mxCacheMs (documented in docs/delivery.md); addresses use their own TTL.
 */
import { isIP } from 'node:net';
import type { Clock } from '../../shared/clock.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import { DELIVERY } from './settings.js';

export interface MxHost {
  name: string;
  priority: number;
  /** True when the domain has no MX and its own A/AAAA stands in (RFC 5321 §5.1). */
  implicit: boolean;
}

export type MxRoute =
  | { kind: 'hosts'; hosts: MxHost[] }
  /** RFC 7505 null MX: the domain accepts no mail. */
  | { kind: 'nullmx' }
  /** The domain does not exist, or has neither MX nor address records. */
  | { kind: 'nxdomain' }
  /** The resolver could not answer (timeout, SERVFAIL, refused): try later. */
  | { kind: 'tempfail'; error: string };

export type AddressResult = { kind: 'ok'; addresses: string[] } | { kind: 'none' } | { kind: 'tempfail'; error: string };

interface Cached<T> {
  expiresAt: number;
  value: T;
}

const PERMANENT_NO_DATA = new Set(['ENODATA', 'ENOTFOUND']);

function isPermanentMiss(err: unknown): boolean {
  return PERMANENT_NO_DATA.has((err as NodeJS.ErrnoException)?.code ?? '');
}

function code(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return `${e?.code ?? 'EDNS'}: ${e?.message ?? String(err)}`;
}

/** Fisher–Yates over each run of equal priority. */
export function orderMx(records: { exchange: string; priority: number }[], random: () => number = Math.random): MxHost[] {
  const sorted = [...records].sort((a, b) => a.priority - b.priority);
  const out: MxHost[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j < sorted.length && sorted[j].priority === sorted[i].priority) j++;
    const run = sorted.slice(i, j);
    for (let k = run.length - 1; k > 0; k--) {
      const r = Math.floor(random() * (k + 1));
      [run[k], run[r]] = [run[r], run[k]];
    }
    for (const rec of run) out.push({ name: rec.exchange.toLowerCase().replace(/\.$/, ''), priority: rec.priority, implicit: false });
    i = j;
  }
  return out;
}

export interface MxResolverOptions {
  /** DNS_SERVERS entries (`host[:port]`); empty or absent: the system's. */
  servers?: readonly string[];
  clock: Clock;
  random?: () => number;
}

export class MxResolver {
  private readonly resolver: Resolver;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly mx = new Map<string, Cached<{ kind: 'mx'; records: { exchange: string; priority: number }[] } | Exclude<MxRoute, { kind: 'hosts' }> | { kind: 'nomx' }>>();
  private readonly addrs = new Map<string, Cached<AddressResult>>();
  private readonly inflight = new Map<string, Promise<unknown>>();

  constructor(opts: MxResolverOptions) {
    this.resolver = createResolver({ servers: opts.servers, timeoutMs: DELIVERY.dnsTimeoutMs, tries: DELIVERY.dnsTries });
    this.clock = opts.clock;
    this.random = opts.random ?? Math.random;
  }

  /** The hosts to try for `domain`, in order (equal priorities shuffled on every call). */
  async route(domain: string): Promise<MxRoute> {
    const d = domain.toLowerCase().replace(/\.$/, '');
    if (isIP(d.replace(/^\[|\]$/g, ''))) return { kind: 'hosts', hosts: [{ name: d.replace(/^\[|\]$/g, ''), priority: 0, implicit: true }] };
    const mx = await this.cached(this.mx, `mx:${d}`, async () => {
      try {
        const records = await this.resolver.resolveMx(d);
        // RFC 7505: a null MX is a single record with an empty exchange ("."); with other
        // records around it is ignored.
        const real = records.filter((r) => r.exchange !== '' && r.exchange !== '.');
        if (real.length === 0 && records.length > 0) return { value: { kind: 'nullmx' as const }, ttlMs: DELIVERY.mxCacheMs };
        if (real.length === 0) return { value: { kind: 'nomx' as const }, ttlMs: DELIVERY.negativeDnsCacheMs };
        return { value: { kind: 'mx' as const, records: real }, ttlMs: DELIVERY.mxCacheMs };
      } catch (err) {
        const c = (err as NodeJS.ErrnoException).code;
        if (c === 'ENODATA') return { value: { kind: 'nomx' as const }, ttlMs: DELIVERY.negativeDnsCacheMs };
        if (c === 'ENOTFOUND') return { value: { kind: 'nxdomain' as const }, ttlMs: DELIVERY.negativeDnsCacheMs };
        return { value: { kind: 'tempfail' as const, error: code(err) }, ttlMs: DELIVERY.failedDnsCacheMs };
      }
    });
    if (mx.kind === 'mx') return { kind: 'hosts', hosts: orderMx(mx.records, this.random) };
    if (mx.kind !== 'nomx') return mx;
    // No MX: the domain's own address records are the implicit MX (RFC 5321 §5.1).
    const a = await this.addresses(d, 4);
    const aaaa = a.kind === 'ok' ? a : await this.addresses(d, 6);
    if (a.kind === 'ok' || aaaa.kind === 'ok') return { kind: 'hosts', hosts: [{ name: d, priority: 0, implicit: true }] };
    if (a.kind === 'tempfail') return a;
    if (aaaa.kind === 'tempfail') return aaaa;
    return { kind: 'nxdomain' };
  }

  /** Addresses of an MX host for one family, cached by their TTL. */
  async addresses(host: string, family: 4 | 6): Promise<AddressResult> {
    const h = host.toLowerCase().replace(/\.$/, '');
    if (isIP(h)) return isIP(h) === family ? { kind: 'ok', addresses: [h] } : { kind: 'none' };
    return this.cached(this.addrs, `a${family}:${h}`, async () => {
      try {
        const recs = family === 4 ? await this.resolver.resolve4(h, { ttl: true }) : await this.resolver.resolve6(h, { ttl: true });
        if (recs.length === 0) return { value: { kind: 'none' as const }, ttlMs: DELIVERY.negativeDnsCacheMs };
        const ttl = Math.min(...recs.map((r) => r.ttl)) * 1000;
        return {
          value: { kind: 'ok' as const, addresses: recs.map((r) => r.address) },
          ttlMs: Math.min(Math.max(ttl, 1_000), DELIVERY.maxDnsCacheMs),
        };
      } catch (err) {
        if (isPermanentMiss(err)) return { value: { kind: 'none' as const }, ttlMs: DELIVERY.negativeDnsCacheMs };
        return { value: { kind: 'tempfail' as const, error: code(err) }, ttlMs: DELIVERY.failedDnsCacheMs };
      }
    });
  }

  /** Forgets every cached answer (tests, operator action). */
  clear(): void {
    this.mx.clear();
    this.addrs.clear();
  }

  private async cached<T>(map: Map<string, Cached<T>>, key: string, load: () => Promise<{ value: T; ttlMs: number }>): Promise<T> {
    const hit = map.get(key);
    if (hit && hit.expiresAt > this.clock.now()) return hit.value;
    let p = this.inflight.get(key) as Promise<T> | undefined;
    if (!p) {
      p = load().then(({ value, ttlMs }) => {
        map.set(key, { value, expiresAt: this.clock.now() + ttlMs });
        if (map.size > 100_000) map.delete(map.keys().next().value as string);
        return value;
      });
      p = p.finally(() => this.inflight.delete(key));
      this.inflight.set(key, p);
    }
    return p;
  }
}
