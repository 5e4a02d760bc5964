/**
 * Content screening's URL blocklist on DNS (mta.md phase 1 "URL blocklist"; docs/mta.md →
 * Content screening): the domains of a message's links are asked of domain blocklists
 * (Spamhaus DBL, SURBL, URIBL) as `<domain>.<zone>`, as SpamAssassin's URIDNSBL rules do.
 * A link's host and each parent domain of two labels or more are asked (no public-suffix
 * list: `co.uk` is asked and simply not listed). Answers are cached; a lookup that fails
 * (timeout, SERVFAIL, the list refusing our resolver) passes the message: a blocklist outage
 * must not stop mail.
 */
import { isIP } from 'node:net';
import type { Clock } from '../../shared/clock.js';
import type { Logger } from '../../shared/log.js';
import type { MtaPolicy } from '../policy.js';
import { DnsblResolver, type DnsblState } from './dnsbl.js';

const URL_HOST = /\bhttps?:\/\/([^\s"'<>/?#\\:@]+)/gi;

/** Lower-case hosts of the http(s) links in the texts, without a trailing dot. */
export function linkHosts(...texts: (string | undefined)[]): Set<string> {
  const out = new Set<string>();
  for (const s of texts) {
    if (!s) continue;
    for (const m of s.matchAll(URL_HOST)) out.add(m[1]!.toLowerCase().replace(/\.$/, ''));
  }
  return out;
}

/** `host` and every parent of it, longest first. */
export function domainAndParents(host: string): string[] {
  const out: string[] = [];
  for (let h = host; h; ) {
    out.push(h);
    const dot = h.indexOf('.');
    if (dot < 0) break;
    h = h.slice(dot + 1);
  }
  return out;
}

/**
 * Whether the pipeline asks the zones: CONTENT_URIBL, else on in production only, as the
 * blocklist monitor (monitorEnabled): development machines and tests must not ask real lists.
 */
export function uriblEnabled(config: { CONTENT_URIBL: boolean | undefined; NODE_ENV: string }): boolean {
  return config.CONTENT_URIBL ?? config.NODE_ENV === 'production';
}

export interface UriblListing {
  domain: string;
  zone: string;
  codes: string[];
}

export interface UriBlocklistOptions {
  zones: readonly string[];
  /** DNS_SERVERS entries; empty: the system's. */
  servers?: readonly string[];
  clock: Clock;
  policy: MtaPolicy['uribl'];
  log: Logger;
}

export class UriBlocklist {
  private readonly resolver: DnsblResolver;
  /** `name zone` → the answer and until when it holds. */
  private readonly cache = new Map<string, { state: DnsblState; codes: string[]; until: number }>();
  private readonly inflight = new Map<string, Promise<{ state: DnsblState; codes: string[] }>>();

  constructor(private readonly o: UriBlocklistOptions) {
    this.resolver = new DnsblResolver({ servers: o.servers, clock: o.clock, policy: o.policy });
  }

  /** The first listed name among the hosts' (in link order, each zone in order); null when none is or none could be asked. */
  async listed(hosts: Iterable<string>): Promise<UriblListing | null> {
    const names = new Set<string>();
    for (const host of hosts) {
      if (isIP(host) || !host.includes('.')) continue;
      for (const name of domainAndParents(host)) {
        if (name.includes('.')) names.add(name);
      }
    }
    const asked = [...names].slice(0, this.o.policy.maxNames);
    const answers = await Promise.all(asked.flatMap((name) => this.o.zones.map(async (zone) => ({ name, zone, ...(await this.ask(name, zone)) }))));
    const hit = answers.find((a) => a.state === 'listed');
    return hit ? { domain: hit.name, zone: hit.zone, codes: hit.codes } : null;
  }

  private ask(name: string, zone: string): Promise<{ state: DnsblState; codes: string[] }> | { state: DnsblState; codes: string[] } {
    const key = `${name} ${zone}`;
    const now = this.o.clock.now();
    const cached = this.cache.get(key);
    if (cached && cached.until > now) return cached;
    let p = this.inflight.get(key);
    if (!p) {
      p = this.resolver.lookupDomain(name, zone).then((r) => {
        this.inflight.delete(key);
        if (r.state === 'unknown') this.o.log.warn({ name, zone, cause: r.cause, codes: r.codes }, 'URI blocklist lookup failed; screening passes the link');
        const ttl = r.state === 'unknown' ? this.o.policy.unknownTtlMs : this.o.policy.cacheTtlMs;
        this.cache.delete(key);
        if (this.cache.size >= this.o.policy.cacheMaxEntries) this.cache.delete(this.cache.keys().next().value!);
        this.cache.set(key, { state: r.state, codes: r.codes, until: this.o.clock.now() + ttl });
        return r;
      });
      this.inflight.set(key, p);
    }
    return p;
  }

  cancel(): void {
    this.resolver.cancel();
  }
}
