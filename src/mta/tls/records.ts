/**
 * The DNS records an operator publishes for a sending domain (mta.md → Delivery), each with
 * its exact value, and their check against what DNS_SERVERS answers: `ok`, `missing` or
 * `mismatch` with the value found. DANE TLSA records of the domain's MX hosts are accepted
 * and their syntax checked (RFC 6698 §2, RFC 7671).
 */
import { createSocket } from 'node:dgram';
import { randomInt } from 'node:crypto';
import { isIP } from 'node:net';
import * as packet from 'dns-packet';
import { SafeHttpClient } from '../../shared/net/client.js';
import { createLookup } from '../../shared/net/resolve.js';
import { createResolver, type Resolver } from '../../shared/net/resolver.js';
import { DELIVERY } from '../delivery/settings.js';
import { TRANSPORT } from './settings.js';
import type { DkimKeyInfo } from '../stores/dkim.js';

export type RecordKind = 'dkim' | 'dkim-pending' | 'spf' | 'dmarc' | 'mta-sts' | 'mta-sts-policy' | 'tls-rpt' | 'return-path' | 'tlsa';

export interface RequiredRecord {
  kind: RecordKind;
  /** DNS owner name, or the policy file's URL for `mta-sts-policy`. */
  name: string;
  type: 'TXT' | 'MX' | 'TLSA' | 'HTTPS';
  value: string;
  /** Why it is needed (one line). */
  purpose: string;
}

export interface CheckedRecord extends RequiredRecord {
  state: 'ok' | 'missing' | 'mismatch';
  found: string[];
  problem?: string;
}

export interface RecordInputs {
  domain: string;
  dkim: DkimKeyInfo[];
  /** Sending IPs of MTA_POOLS (the wildcard excluded). */
  sendingIps: string[];
  /** Return-path (VERP) and CFBL host: BOUNCE_HOST. */
  bounceHost: string;
  /** Where mail to the bounce host goes: our inbound listener's name (the first EHLO name). */
  inboundHost: string;
  /** MTA_TLSRPT_RUA. */
  tlsrptRua?: readonly string[];
  /** MX hosts of the domain's inbound mail for its own MTA-STS policy (default: inboundHost). */
  mxHosts?: string[];
}

/** Every record to publish, with its value. */
export function requiredRecords(i: RecordInputs): RequiredRecord[] {
  const out: RequiredRecord[] = [];
  for (const k of i.dkim) {
    out.push({ kind: 'dkim', name: k.dnsName, type: 'TXT', value: k.dnsValue, purpose: `active DKIM key (${k.algorithm})` });
    if (k.pending) out.push({ kind: 'dkim-pending', name: k.pending.dnsName, type: 'TXT', value: k.pending.dnsValue, purpose: 'pending DKIM key: publish before it is activated' });
  }
  const ips = i.sendingIps.map((ip) => (ip.includes(':') ? `ip6:${ip}` : `ip4:${ip}`));
  out.push({ kind: 'spf', name: i.domain, type: 'TXT', value: ['v=spf1', ...ips, '~all'].join(' '), purpose: 'SPF: the sending IPs (merge into an existing SPF record)' });
  out.push({ kind: 'dmarc', name: `_dmarc.${i.domain}`, type: 'TXT', value: `v=DMARC1; p=none; rua=mailto:dmarc@${i.domain}`, purpose: 'DMARC (any v=DMARC1 policy is accepted)' });
  const mx = i.mxHosts?.length ? i.mxHosts : [i.inboundHost];
  const policy = ['version: STSv1', 'mode: enforce', ...mx.map((m) => `mx: ${m}`), 'max_age: 604800', ''].join('\r\n');
  out.push({ kind: 'mta-sts', name: `_mta-sts.${i.domain}`, type: 'TXT', value: `v=STSv1; id=${policyId(policy)}`, purpose: 'MTA-STS: announces the policy; change id whenever the file changes' });
  out.push({ kind: 'mta-sts-policy', name: `https://mta-sts.${i.domain}/.well-known/mta-sts.txt`, type: 'HTTPS', value: policy, purpose: 'MTA-STS policy file, served as text/plain with a valid certificate' });
  if (i.tlsrptRua?.length) out.push({ kind: 'tls-rpt', name: `_smtp._tls.${i.domain}`, type: 'TXT', value: `v=TLSRPTv1; rua=${i.tlsrptRua.join(',')}`, purpose: 'TLS-RPT: where senders report TLS failures' });
  out.push({ kind: 'return-path', name: i.bounceHost, type: 'MX', value: `10 ${i.inboundHost}`, purpose: 'return path (VERP bounces) and CFBL complaint address host' });
  return out;
}

/** A stable id for a policy text (changes whenever the text changes). */
function policyId(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
}

/** Tags of a `k=v; k=v` record (DKIM, DMARC, STS, TLS-RPT). */
export function tags(txt: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const part of txt.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) m.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).replace(/\s+/g, ''));
  }
  return m;
}

/** Whether a DKIM TXT value publishes the same public key as `expected`. */
export function dkimMatches(found: string, expected: string): boolean {
  const f = tags(found);
  const e = tags(expected);
  return !!f.get('p') && f.get('p') === e.get('p') && (f.get('k') ?? 'rsa') === (e.get('k') ?? 'rsa');
}

/** RFC 6698 §2.1 presentation syntax: usage 0–3, selector 0–1, matching type 0–2, hex data of the right length. */
export function checkTlsa(value: string): string | null {
  const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+([0-9A-Fa-f\s]+)$/.exec(value);
  if (!m) return 'not "usage selector matching-type hex-data"';
  const [usage, selector, mtype] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const hex = m[4].replace(/\s+/g, '');
  if (usage > 3) return `certificate usage ${usage} is not 0–3`;
  if (selector > 1) return `selector ${selector} is not 0 or 1`;
  if (mtype > 2) return `matching type ${mtype} is not 0–2`;
  if (hex.length % 2) return 'odd number of hex digits';
  const want = mtype === 1 ? 64 : mtype === 2 ? 128 : 0;
  if (want && hex.length !== want) return `matching type ${mtype} needs ${want / 2} bytes of data, found ${hex.length / 2}`;
  if (!want && hex.length === 0) return 'no certificate data';
  return null;
}

type Lookup = { kind: 'found'; values: string[] } | { kind: 'missing' } | { kind: 'error'; error: string };

export class RecordChecker {
  private readonly resolver: Resolver;

  private readonly http: SafeHttpClient;

  private readonly enabled: boolean;

  /** `enabled: false` (tests without DNS_SERVERS, as deliveryEnabled): nothing is resolved, every record reads missing. */
  constructor(o: { dnsServers?: readonly string[]; allowHosts?: readonly string[]; ca?: string | Buffer | (string | Buffer)[]; enabled?: boolean } = {}) {
    this.enabled = o.enabled ?? true;
    this.resolver = createResolver({ servers: o.dnsServers, timeoutMs: DELIVERY.dnsTimeoutMs, tries: DELIVERY.dnsTries });
    this.http = new SafeHttpClient({ lookup: createLookup(o.dnsServers), allowHosts: o.allowHosts, ca: o.ca, maxSocketsPerHost: 1 });
  }

  /** The policy file's body, or null when it cannot be fetched as a policy must be (200, validated HTTPS). */
  private async fetchPolicy(url: string): Promise<string | null> {
    const res = await this.http.request(url, { timeoutMs: TRANSPORT.stsFetchTimeoutMs, maxBodyKept: TRANSPORT.stsMaxBodyBytes, maxBodyRead: TRANSPORT.stsMaxBodyBytes });
    return res.status === 200 ? res.body : null;
  }

  private async q(name: string, type: 'TXT' | 'MX' | 'TLSA'): Promise<Lookup> {
    if (!this.enabled) return { kind: 'error', error: 'DNS lookups are disabled (NODE_ENV=test without DNS_SERVERS)' };
    try {
      if (type === 'TXT') return { kind: 'found', values: (await this.resolver.resolveTxt(name)).map((p) => p.join('')) };
      if (type === 'MX') return { kind: 'found', values: (await this.resolver.resolveMx(name)).map((r) => `${r.priority} ${r.exchange}`) };
      return await this.tlsaQuery(name);
    } catch (err) {
      const c = (err as NodeJS.ErrnoException).code;
      if (c === 'ENODATA' || c === 'ENOTFOUND') return { kind: 'missing' };
      return { kind: 'error', error: `${c ?? 'error'}: ${(err as Error).message}` };
    }
  }

  async check(records: RequiredRecord[], domain: string): Promise<CheckedRecord[]> {
    const out = await Promise.all(records.map((r) => this.checkOne(r)));
    out.push(...(await this.tlsa(domain)));
    return out;
  }

  private async checkOne(r: RequiredRecord): Promise<CheckedRecord> {
    if (r.type === 'HTTPS') {
      if (!this.enabled) return { ...r, state: 'missing', found: [] };
      const body = await this.fetchPolicy(r.name).catch(() => null);
      if (body === null) return { ...r, state: 'missing', found: [] };
      return { ...r, state: /^version:\s*STSv1/m.test(body) ? 'ok' : 'mismatch', found: [body] };
    }
    const res = await this.q(r.name, r.type as 'TXT' | 'MX');
    if (res.kind === 'error') return { ...r, state: 'missing', found: [], problem: res.error };
    if (res.kind === 'missing') return { ...r, state: 'missing', found: [] };
    const v = res.values;
    const rel = (f: (x: string) => boolean, prefix: RegExp) => {
      const candidates = v.filter((x) => prefix.test(x));
      if (candidates.length === 0) return { ...r, state: 'missing' as const, found: v };
      return { ...r, state: candidates.some(f) ? ('ok' as const) : ('mismatch' as const), found: candidates };
    };
    switch (r.kind) {
      case 'dkim':
      case 'dkim-pending':
        return rel((x) => dkimMatches(x, r.value), /^v=DKIM1|p=/i);
      case 'spf': {
        const need = r.value.split(' ').filter((t) => /^ip[46]:/.test(t));
        return rel((x) => need.every((t) => x.split(/\s+/).includes(t)), /^v=spf1\b/i);
      }
      case 'dmarc':
        return rel(() => true, /^v=DMARC1\b/i);
      case 'mta-sts':
        return rel((x) => /^v=STSv1;\s*id=[A-Za-z0-9]{1,32}\s*;?\s*$/.test(x), /^v=STSv1\b/);
      case 'tls-rpt':
        return rel((x) => tags(x).get('rua') === tags(r.value).get('rua'), /^v=TLSRPTv1\b/);
      case 'return-path': {
        const host = r.value.split(' ')[1]!.toLowerCase();
        return { ...r, state: v.some((x) => x.split(' ')[1]?.toLowerCase().replace(/\.$/, '') === host) ? 'ok' : 'mismatch', found: v };
      }
      default:
        return { ...r, state: 'ok', found: v };
    }
  }

  /**
   * Node 20's resolver has no TLSA query (resolveTlsa arrived in Node 22.15), so one UDP query
   * is encoded and decoded with dns-packet, to the first server of DNS_SERVERS (or the system's).
   */
  private tlsaQuery(name: string): Promise<Lookup> {
    const server = this.resolver.getServers()[0] ?? '127.0.0.1';
    // getServers(): `1.2.3.4`, `1.2.3.4:5353`, `::1` or `[::1]:5353`.
    const m = /^\[(.+)\]:(\d+)$/.exec(server) ?? /^([^:]+):(\d+)$/.exec(server);
    const host = m ? m[1]! : server;
    const port = m ? Number(m[2]) : 53;
    const id = randomInt(65_536);
    const sock = createSocket(isIP(host) === 6 ? 'udp6' : 'udp4');
    return new Promise<Lookup>((resolve) => {
      const done = (r: Lookup) => {
        clearTimeout(timer);
        sock.close();
        resolve(r);
      };
      const timer = setTimeout(() => done({ kind: 'error', error: 'ETIMEOUT: TLSA query timed out' }), DELIVERY.dnsTimeoutMs);
      sock.on('error', (err) => done({ kind: 'error', error: err.message }));
      sock.on('message', (buf) => {
        let res;
        try {
          res = packet.decode(buf);
        } catch (err) {
          return done({ kind: 'error', error: `bad DNS answer: ${(err as Error).message}` });
        }
        if (res.id !== id) return;
        const rcode = (res as { rcode?: string }).rcode;
        const answers = (res.answers ?? []).filter((a) => a.type === 'TLSA') as packet.TlsaAnswer[];
        if (answers.length) return done({ kind: 'found', values: answers.map((a) => `${a.data.usage} ${a.data.selector} ${a.data.matchingType} ${a.data.certificate.toString('hex')}`) });
        done(rcode && rcode !== 'NOERROR' && rcode !== 'NXDOMAIN' ? { kind: 'error', error: rcode } : { kind: 'missing' });
      });
      sock.send(packet.encode({ type: 'query', id, flags: packet.RECURSION_DESIRED, questions: [{ type: 'TLSA', name }] }), port, host);
    });
  }

  /** TLSA records at `_25._tcp.<mx>` for each MX of the domain: optional, so only found ones are listed. */
  private async tlsa(domain: string): Promise<CheckedRecord[]> {
    const mx = await this.q(domain, 'MX');
    if (mx.kind !== 'found') return [];
    const out: CheckedRecord[] = [];
    for (const m of mx.values) {
      const host = m.split(' ')[1]!.replace(/\.$/, '');
      const name = `_25._tcp.${host}`;
      const res = await this.q(name, 'TLSA');
      if (res.kind !== 'found') continue;
      for (const value of res.values) {
        const problem = checkTlsa(value);
        out.push({ kind: 'tlsa', name, type: 'TLSA', value, purpose: 'DANE (optional): syntax checked', state: problem ? 'mismatch' : 'ok', found: [value], ...(problem ? { problem } : {}) });
      }
    }
    return out;
  }
}
