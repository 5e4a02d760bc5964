/** Forward-confirmed reverse DNS of a sending IP, and whether it matches the EHLO name. */
import { createResolver } from '../../shared/net/resolver.js';
import { isIPv4 } from 'node:net';
import { dnsblName } from './dnsbl.js';

export interface ReverseDns {
  /** `confirmed`: a PTR name resolves back to the IP; `mismatch`: none does; `missing`: no PTR; `unknown`: the resolver failed. */
  status: 'confirmed' | 'mismatch' | 'missing' | 'unknown';
  ptr: string[];
  /** The confirmed PTR name equals the EHLO name (null when not confirmed). */
  ehloAligned: boolean | null;
}

/** Whether receivers will accept this address's identity: FCrDNS, and the EHLO name matching it. */
export interface IdentityReadiness {
  ehloName: string;
  status: ReverseDns['status'];
  /** Every PTR name of the address. */
  ptr: string[];
  /** The PTR names whose A/AAAA include the address. */
  forwardConfirmed: string[];
  /** The EHLO name is one of the forward-confirmed PTR names (null: not known). */
  ehloMatchesPtr: boolean | null;
  /** The EHLO name's A/AAAA include the address (null: the resolver failed). */
  ehloResolves: boolean | null;
  ready: boolean;
  /** What stands in the way, in words (empty when ready). */
  problems: string[];
}

/** Asks DNS now (GET /ip-reputation/:ip): the PTR names, which resolve back, and the EHLO name. */
export async function identityReadiness(ip: string, ehloName: string, opts: { servers?: readonly string[]; timeoutMs: number }): Promise<IdentityReadiness> {
  const r = createResolver({ servers: opts.servers, timeoutMs: opts.timeoutMs, tries: 2 });
  const ehlo = ehloName.toLowerCase();
  const [rd, ehloAddrs] = await Promise.all([
    fcrdns(ip, ehlo, opts),
    (isIPv4(ip) ? r.resolve4(ehlo) : r.resolve6(ehlo)).then(
      (a): string[] | null => a,
      (err: NodeJS.ErrnoException): string[] | null => (err.code === 'ENOTFOUND' || err.code === 'ENODATA' ? [] : null),
    ),
  ]);
  const ehloResolves = ehloAddrs === null ? null : ehloAddrs.includes(ip);
  const ehloMatchesPtr = rd.status === 'confirmed' ? rd.ehloAligned : rd.status === 'unknown' ? null : false;
  const problems: string[] = [];
  if (rd.status === 'missing') problems.push(`no PTR record for ${ip}: set one (ideally ${ehlo})`);
  if (rd.status === 'mismatch') problems.push(`no PTR name (${rd.ptr.join(', ')}) resolves back to ${ip}`);
  if (rd.status === 'unknown') problems.push('the resolver did not answer the reverse DNS lookups: ask again');
  if (rd.status === 'confirmed' && !rd.ehloAligned) problems.push(`the EHLO name ${ehlo} is not the confirmed PTR name (${rd.confirmed.join(', ')})`);
  if (ehloResolves === false) problems.push(`the EHLO name ${ehlo} does not resolve to ${ip}`);
  if (ehloResolves === null) problems.push(`the resolver did not answer for the EHLO name ${ehlo}: ask again`);
  return { ehloName: ehlo, status: rd.status, ptr: rd.ptr, forwardConfirmed: rd.confirmed, ehloMatchesPtr, ehloResolves, ready: problems.length === 0, problems };
}

export async function forwardConfirmed(ip: string, ehloName: string, opts: { servers?: readonly string[]; timeoutMs: number }): Promise<ReverseDns> {
  const { status, ptr, ehloAligned } = await fcrdns(ip, ehloName, opts);
  return { status, ptr, ehloAligned };
}

/** FCrDNS with the PTR names that resolved back (`confirmed`). */
async function fcrdns(ip: string, ehloName: string, opts: { servers?: readonly string[]; timeoutMs: number }): Promise<ReverseDns & { confirmed: string[] }> {
  const r = createResolver({ servers: opts.servers, timeoutMs: opts.timeoutMs, tries: 2 });
  let ptr: string[];
  try {
    // A PTR query, not r.reverse(): c-ares's reverse falls back to the hosts file when DNS times
    // out and then says ENOTFOUND, which would read a resolver outage as a missing PTR.
    const arpa = dnsblName(ip, isIPv4(ip) ? 'in-addr.arpa' : 'ip6.arpa');
    ptr = (await r.resolvePtr(arpa)).map((n) => n.toLowerCase().replace(/\.$/, ''));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return { status: 'missing', ptr: [], ehloAligned: null, confirmed: [] };
    return { status: 'unknown', ptr: [], ehloAligned: null, confirmed: [] };
  }
  let failed = false;
  const confirmed: string[] = [];
  for (const name of ptr) {
    try {
      const addrs = isIPv4(ip) ? await r.resolve4(name) : await r.resolve6(name);
      if (addrs.includes(ip)) confirmed.push(name);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTFOUND' && code !== 'ENODATA') failed = true;
    }
  }
  if (confirmed.length) return { status: 'confirmed', ptr, ehloAligned: confirmed.includes(ehloName.toLowerCase()), confirmed };
  return { status: failed ? 'unknown' : 'mismatch', ptr, ehloAligned: null, confirmed };
}
