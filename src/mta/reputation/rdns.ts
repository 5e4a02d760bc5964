/** Forward-confirmed reverse DNS of a sending IP, and whether it matches the EHLO name. */
import { promises as dns } from 'node:dns';
import { isIPv4 } from 'node:net';
import { dnsblName } from './dnsbl.js';

export interface ReverseDns {
  /** `confirmed`: a PTR name resolves back to the IP; `mismatch`: none does; `missing`: no PTR; `unknown`: the resolver failed. */
  status: 'confirmed' | 'mismatch' | 'missing' | 'unknown';
  ptr: string[];
  /** The confirmed PTR name equals the EHLO name (null when not confirmed). */
  ehloAligned: boolean | null;
}

export async function forwardConfirmed(ip: string, ehloName: string, opts: { servers?: readonly string[]; timeoutMs: number }): Promise<ReverseDns> {
  const r = new dns.Resolver({ timeout: opts.timeoutMs, tries: 2 });
  if (opts.servers?.length) r.setServers([...opts.servers]);
  let ptr: string[];
  try {
    // A PTR query, not r.reverse(): c-ares's reverse falls back to the hosts file when DNS times
    // out and then says ENOTFOUND, which would read a resolver outage as a missing PTR.
    const arpa = dnsblName(ip, isIPv4(ip) ? 'in-addr.arpa' : 'ip6.arpa');
    ptr = (await r.resolvePtr(arpa)).map((n) => n.toLowerCase().replace(/\.$/, ''));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return { status: 'missing', ptr: [], ehloAligned: null };
    return { status: 'unknown', ptr: [], ehloAligned: null };
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
  if (confirmed.length) return { status: 'confirmed', ptr, ehloAligned: confirmed.includes(ehloName.toLowerCase()) };
  return { status: failed ? 'unknown' : 'mismatch', ptr, ehloAligned: null };
}
