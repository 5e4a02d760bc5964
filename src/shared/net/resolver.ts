/**
 * The one place a DNS resolver (a c-ares channel) is made. `servers` are DNS_SERVERS entries
 * (`host[:port]`); empty or absent: the system's. Timeout and tries are each caller's policy.
 */
import { promises as dns } from 'node:dns';

export type Resolver = dns.Resolver;

export interface ResolverOptions {
  servers?: readonly string[] | undefined;
  /** Per query attempt (c-ares `timeout`). */
  timeoutMs: number;
  /** Attempts per server (c-ares `tries`). */
  tries: number;
}

export function createResolver(o: ResolverOptions): Resolver {
  const r = new dns.Resolver({ timeout: o.timeoutMs, tries: o.tries });
  if (o.servers?.length) r.setServers([...o.servers]);
  return r;
}
