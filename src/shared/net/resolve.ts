/**
 * Name resolution for outbound requests. The resolver is injectable: it is the outside world
 * (tests point it at a loopback authoritative server through DNS_SERVERS, or pass a function).
 */
import { promises as dns } from 'node:dns';
import { createResolver } from './resolver.js';

/** Every address a name resolves to (IPv4 first). Rejects with ResolveError. */
export type LookupFn = (host: string, signal?: AbortSignal) => Promise<string[]>;

export class ResolveError extends Error {
  constructor(
    message: string,
    /** True when the name has no addresses (NXDOMAIN / no A or AAAA), as opposed to a failing resolver. */
    readonly noAddresses: boolean,
  ) {
    super(message);
    this.name = 'ResolveError';
  }
}

const NO_DATA = new Set(['ENODATA', 'ENOTFOUND', 'NOTFOUND', 'ENONAME', 'NODATA']);

/** The system resolver (getaddrinfo: /etc/hosts, nsswitch). */
export const systemLookup: LookupFn = async (host) => {
  try {
    const answers = await dns.lookup(host, { all: true, verbatim: true });
    const v4 = answers.filter((a) => a.family === 4).map((a) => a.address);
    const v6 = answers.filter((a) => a.family === 6).map((a) => a.address);
    return [...v4, ...v6];
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? '';
    throw new ResolveError(`DNS lookup of ${host} failed: ${code || (err as Error).message}`, NO_DATA.has(code));
  }
};

/** Queries the given DNS servers (`host[:port]`, as DNS_SERVERS) directly for A and AAAA. */
export function resolverLookup(servers: readonly string[], opts: { timeoutMs?: number; tries?: number } = {}): LookupFn {
  return async (host, signal) => {
    // One Resolver per lookup so cancel() on abort only cancels this lookup.
    const resolver = createResolver({ servers, timeoutMs: opts.timeoutMs ?? 2_000, tries: opts.tries ?? 2 });
    const onAbort = () => resolver.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const [a, aaaa] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
      const out = [...(a.status === 'fulfilled' ? a.value : []), ...(aaaa.status === 'fulfilled' ? aaaa.value : [])];
      if (out.length) return out;
      const codes = [a, aaaa].map((r) => (r.status === 'rejected' ? ((r.reason as NodeJS.ErrnoException).code ?? 'error') : 'ENODATA'));
      throw new ResolveError(`DNS lookup of ${host} failed: ${[...new Set(codes)].join(', ')}`, codes.every((c) => NO_DATA.has(c)));
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  };
}

/** DNS_SERVERS when set, the system resolver otherwise. */
export function createLookup(dnsServers?: readonly string[]): LookupFn {
  return dnsServers && dnsServers.length ? resolverLookup(dnsServers) : systemLookup;
}
