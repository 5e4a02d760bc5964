/**
 * The sending-address audit (mta.md → management rules 3 and 4; docs/reputation.md): per
 * sending IP, outbound TCP/25 egress, the blocklists (critical decoded, warning, further, the
 * credential-gated feeds), forward-confirmed reverse DNS and a sample of the /24, folded into
 * a verdict with a removal assistant per listing. Advisory only: it never quarantines an
 * address and never blocks a send.
 */
import { connect } from 'node:net';
import { isIPv4 } from 'node:net';
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { LookupFn } from '../../shared/net/resolve.js';
import type { SafeHttpClient } from '../../shared/net/client.js';
import type { MtaPolicy } from '../policy.js';
import { IMPLICIT_ADDRESS, type SendingPools } from '../pools.js';
import { SUBLIST_ACTION, ZONES, decodeCodes } from './data.js';
import type { DnsblResolver, DnsblResult } from './dnsbl.js';
import { mapLimit } from './monitor.js';
import { forwardConfirmed, type ReverseDns } from './rdns.js';

export type Verdict = 'clean' | 'action_required' | 'unusable';
export type ZoneKind = 'critical' | 'warning' | 'further' | 'feed';

export interface EgressProbe {
  host: string;
  /**
   * `open`: the server's 220 greeting arrived; `refused`, `timeout`, `error` otherwise;
   * `unresolved`: the host name did not resolve (a resolver problem: port 25 was not tried).
   */
  state: 'open' | 'refused' | 'timeout' | 'error' | 'unresolved';
}

export interface ZoneCheck {
  zone: string;
  kind: ZoneKind;
  state: 'listed' | 'clean' | 'unknown' | 'skipped';
  codes: string[];
  lists: string[];
}

export interface Listing {
  zone: string;
  kind: ZoneKind;
  /** The first return code (decisions.md: `code`); all of them in `codes`. */
  code: string | null;
  codes: string[];
  lists: string[];
  removalUrl: string | null;
  assistant: { removalUrl: string | null; likelyCause: string[]; delistingPath: string; requestText: string };
}

export interface AuditEntry {
  ip: string;
  ehloName: string;
  verdict: Verdict;
  lowConfidence: boolean;
  headline: string;
  nextAction: string;
  at: string;
  egress: EgressProbe[];
  blocklists: ZoneCheck[];
  reverseDns: ReverseDns;
  neighbourhood: { sampled: number; listed: number; unknown: number; prefix: string | null };
  listings: Listing[];
}

export interface AuditRun {
  at: number;
  entries: AuditEntry[];
}

export interface AuditDeps {
  coord: Coordination;
  clock: Clock;
  pools: SendingPools;
  resolver: DnsblResolver;
  policy: MtaPolicy['reputation'];
  dnsServers: readonly string[];
  zones: { critical: string; warning: readonly string[]; further: readonly string[] };
  feeds: { dqsKey?: string; dqsZone: string; abuseIpdbKey?: string; abuseIpdbUrl: string; http?: SafeHttpClient };
  probeHosts: readonly string[];
  /** Resolves probe host names (DNS_SERVERS). */
  lookup: LookupFn;
  /** Recent sending per IP for the likely cause: status → count over the last day and week. */
  recent(ip: string): Promise<{ day: Record<string, number>; week: Record<string, number> }>;
}

const KEY = 'persist:mta:ip-audit';

export class AddressAudit {
  private running: Promise<AuditRun> | null = null;

  constructor(private readonly d: AuditDeps) {}

  async stored(): Promise<AuditRun | null> {
    return this.d.coord.getJson<AuditRun>(KEY);
  }

  /** POST /ip-audit/run: a run from the last auditFreshMs is served instead of probing again. */
  async run(opts: { force?: boolean } = {}): Promise<{ run: AuditRun; fresh: boolean }> {
    const last = await this.stored();
    if (!opts.force && last && this.d.clock.now() - last.at < this.d.policy.auditFreshMs) return { run: last, fresh: false };
    this.running ??= this.sweep().finally(() => {
      this.running = null;
    });
    return { run: await this.running, fresh: true };
  }

  private async sweep(): Promise<AuditRun> {
    const ips = this.d.pools.addresses.filter((a) => a !== IMPLICIT_ADDRESS);
    const entries: AuditEntry[] = [];
    for (const ip of ips) entries.push(await this.auditOne(ip));
    const run = { at: this.d.clock.now(), entries };
    await this.d.coord.setJson(KEY, run);
    return run;
  }

  private async auditOne(ip: string): Promise<AuditEntry> {
    const { critical, warning, further } = this.d.zones;
    const ehloName = this.d.pools.find(ip)?.ehloName ?? '';
    const zoneList: { zone: string; kind: ZoneKind; query: string }[] = [
      { zone: critical, kind: 'critical', query: critical },
      ...warning.map((z) => ({ zone: z, kind: 'warning' as const, query: z })),
      ...further.map((z) => ({ zone: z, kind: 'further' as const, query: z })),
    ];
    // DQS is queried as <key>.<zone>; the key never appears in a report.
    if (this.d.feeds.dqsKey) zoneList.push({ zone: this.d.feeds.dqsZone, kind: 'feed', query: `${this.d.feeds.dqsKey}.${this.d.feeds.dqsZone}` });
    const [egress, answers, reverseDns, neighbourhood, abuse] = await Promise.all([
      this.egress(ip),
      mapLimit(zoneList, this.d.policy.concurrency, (z) => this.d.resolver.lookup(ip, z.query)),
      forwardConfirmed(ip, ehloName, { servers: this.d.dnsServers, timeoutMs: this.d.policy.queryTimeoutMs }),
      this.neighbours(ip),
      this.abuseIpdb(ip),
    ]);
    const blocklists: ZoneCheck[] = answers.map((a: DnsblResult, i) => ({
      zone: zoneList[i]!.zone,
      kind: zoneList[i]!.kind,
      state: a.state,
      codes: a.codes,
      lists: a.state === 'listed' ? decodeCodes(zoneList[i]!.zone, a.codes, critical) : [],
    }));
    if (abuse) blocklists.push(abuse);
    const recent = await this.d.recent(ip);
    const listings = blocklists.filter((b) => b.state === 'listed').map((b) => this.listing(ip, b, recent));
    return { ip, ehloName, ...judge({ egress, blocklists, reverseDns, neighbourhood, share: this.d.policy.neighbourListedShare }), at: new Date(this.d.clock.now()).toISOString(), egress, blocklists, reverseDns, neighbourhood, listings };
  }

  /** TCP/25 from the sending IP to each probe host; open once its 220 greeting arrives. */
  private egress(ip: string): Promise<EgressProbe[]> {
    return Promise.all(
      this.d.probeHosts.map(async (hostPort) => {
        const m = /^(.*?)(?::(\d+))?$/.exec(hostPort)!;
        const host = m[1]!;
        const port = m[2] ? Number(m[2]) : 25;
        let address: string;
        try {
          address = /^[\d.]+$/.test(host) ? host : (await this.d.lookup(host))[0]!;
        } catch {
          return { host: hostPort, state: 'unresolved' as const };
        }
        return { host: hostPort, state: await probe(address, port, ip, this.d.policy.probeTimeoutMs) };
      }),
    );
  }

  /** A spread sample of the /24 on the critical zone (IPv4 only). */
  private async neighbours(ip: string): Promise<AuditEntry['neighbourhood']> {
    if (!isIPv4(ip)) return { sampled: 0, listed: 0, unknown: 0, prefix: null };
    const o = ip.split('.').map(Number);
    const n = this.d.policy.neighbourSample;
    const step = Math.floor(254 / n);
    const sample: string[] = [];
    for (let i = 0; i < n; i++) {
      const last = 1 + ((o[3]! + step * (i + 1)) % 254);
      if (last !== o[3]) sample.push(`${o[0]}.${o[1]}.${o[2]}.${last}`);
    }
    const r = await mapLimit(sample, this.d.policy.concurrency, (a) => this.d.resolver.lookup(a, this.d.zones.critical));
    return { sampled: sample.length, listed: r.filter((x) => x.state === 'listed').length, unknown: r.filter((x) => x.state === 'unknown').length, prefix: `${o[0]}.${o[1]}.${o[2]}.0/24` };
  }

  /** AbuseIPDB (only with its key; without one it is skipped silently). */
  private async abuseIpdb(ip: string): Promise<ZoneCheck | null> {
    const { abuseIpdbKey, abuseIpdbUrl, http } = this.d.feeds;
    if (!abuseIpdbKey || !http) return null;
    try {
      const res = await http.request(`${abuseIpdbUrl}?ipAddress=${encodeURIComponent(ip)}&maxAgeInDays=90`, {
        headers: { key: abuseIpdbKey, accept: 'application/json' },
        timeoutMs: this.d.policy.probeTimeoutMs,
      });
      if (res.status !== 200) return { zone: 'abuseipdb.com', kind: 'feed', state: 'unknown', codes: [], lists: [] };
      const score = Number((JSON.parse(res.body) as { data?: { abuseConfidenceScore?: number } }).data?.abuseConfidenceScore);
      if (!Number.isFinite(score)) return { zone: 'abuseipdb.com', kind: 'feed', state: 'unknown', codes: [], lists: [] };
      return { zone: 'abuseipdb.com', kind: 'feed', state: score > 0 ? 'listed' : 'clean', codes: score > 0 ? [`score:${score}`] : [], lists: [] };
    } catch {
      return { zone: 'abuseipdb.com', kind: 'feed', state: 'unknown', codes: [], lists: [] };
    }
  }

  private listing(ip: string, b: ZoneCheck, recent: { day: Record<string, number>; week: Record<string, number> }): Listing {
    const removalUrl = ZONES[b.zone]?.removalUrl ?? null;
    const p = this.d.policy;
    const total = (r: Record<string, number>) => Object.values(r).reduce((a, n) => a + n, 0);
    const day = total(recent.day);
    const causes: string[] = [];
    const bounced = (recent.day.bounced ?? 0) + (recent.day.failed ?? 0);
    if (day > 0 && bounced / day > p.causeBounceRate) causes.push(`bounce rate ${(100 * bounced / day).toFixed(1)}% over the last 24 h`);
    if (day > 0 && (recent.day.complained ?? 0) / day > p.causeComplaintRate) causes.push(`complaint rate ${(100 * (recent.day.complained ?? 0) / day).toFixed(2)}% over the last 24 h`);
    const weekAvg = total(recent.week) / 7;
    if (weekAvg > 0 && day > p.causeSpikeFactor * weekAvg) causes.push(`volume spike: ${day} sends in 24 h against a daily average of ${Math.round(weekAvg)}`);
    if (causes.length === 0) causes.push(day === 0 ? 'no sending from this address recently: the listing likely predates it (previous tenant of the address)' : 'nothing in our recent sending metrics stands out');
    causes.push(...b.lists.map((l) => `${l}: ${SUBLIST_ACTION[l] ?? 'see the list operator'}`));
    const delistingPath = removalUrl ? `fix the cause, then request removal at ${removalUrl}` : `fix the cause, then contact the operator of ${b.zone}`;
    const requestText = [
      `Hello, please review the listing of ${ip} on ${b.zone}${b.codes.length ? ` (${b.codes.join(', ')})` : ''}.`,
      `The address is a dedicated outbound mail server (EHLO ${this.d.pools.find(ip)?.ehloName ?? ip}).`,
      `Likely cause we found: ${causes[0]}. We have addressed it and monitor bounces and complaints per address.`,
      'Thank you.',
    ].join(' ');
    return { zone: b.zone, kind: b.kind, code: b.codes[0] ?? null, codes: b.codes, lists: b.lists, removalUrl, assistant: { removalUrl, likelyCause: causes, delistingPath, requestText } };
  }
}

/**
 * The verdict table (docs/reputation.md). Nothing unanswered ever counts as clean: a blocklist,
 * reverse DNS or /24 sample lookup that failed, or probe hosts that did not resolve, ask for a
 * re-run instead.
 */
export function judge(a: {
  egress: EgressProbe[];
  blocklists: ZoneCheck[];
  reverseDns: ReverseDns;
  neighbourhood: AuditEntry['neighbourhood'];
  share: number;
}): { verdict: Verdict; lowConfidence: boolean; headline: string; nextAction: string } {
  const unknown = a.blocklists.filter((b) => b.state === 'unknown').map((b) => b.zone);
  const unresolved = a.egress.filter((e) => e.state === 'unresolved').map((e) => e.host);
  const egressOpen = a.egress.some((e) => e.state === 'open');
  // Port 25 is blocked only when every probe host was tried and none answered; a host whose
  // name did not resolve says nothing about port 25.
  const egressUnknown = !egressOpen && unresolved.length > 0;
  const n = a.neighbourhood;
  const lowConfidence = unknown.length > 0 || a.reverseDns.status === 'unknown' || n.unknown > 0 || egressUnknown;
  const listed = a.blocklists.filter((b) => b.state === 'listed');
  const critical = listed.find((b) => b.kind === 'critical');
  const rerun = (headline: string, cause: string) => ({ verdict: 'action_required' as const, lowConfidence, headline, nextAction: `${cause}: re-run the audit (POST /ip-audit/run)` });
  if (critical?.lists.includes('DROP')) return { verdict: 'unusable', lowConfidence, headline: `listed on ${critical.zone} DROP (hijacked or criminal range)`, nextAction: 'use an address from another provider or range' };
  if (a.egress.length > 0 && !egressOpen && !egressUnknown) return { verdict: 'unusable', lowConfidence, headline: 'outbound TCP/25 is blocked', nextAction: 'ask the provider to open port 25, or set MTA_FAILOVER_RELAY_URL' };
  if (n.sampled > 0 && n.listed / n.sampled > a.share) return { verdict: 'unusable', lowConfidence, headline: `${n.listed} of ${n.sampled} sampled neighbours in ${n.prefix} are listed`, nextAction: 'the range has a poor reputation: use an address from another range' };
  if (listed.length) {
    return { verdict: 'action_required', lowConfidence, headline: `listed on ${listed.map((b) => b.zone + (b.lists.length ? ` (${b.lists.join(', ')})` : '')).join(', ')}`, nextAction: 'request removal (see each listing), then re-run the audit' };
  }
  if (egressUnknown) return rerun(`outbound TCP/25 not checked: ${unresolved.join(', ')} did not resolve`, 'the resolver failed (check DNS_SERVERS and AUDIT_PROBE_MX_HOSTS)');
  if (unknown.length) return rerun(`blocklist status unknown on ${unknown.join(', ')}`, 'the resolver did not answer');
  if (a.reverseDns.status === 'unknown') return rerun('reverse DNS unknown', 'the resolver did not answer the PTR or its forward lookup');
  if (n.unknown > 0) return rerun(`${n.unknown} of ${n.sampled} sampled neighbours in ${n.prefix} unknown`, 'the resolver did not answer');
  if (a.reverseDns.status !== 'confirmed') return { verdict: 'action_required', lowConfidence, headline: `reverse DNS ${a.reverseDns.status}`, nextAction: 'set a PTR record that resolves back to this address (ideally the EHLO name)' };
  return { verdict: 'clean', lowConfidence, headline: 'clean', nextAction: 'none' };
}

function probe(address: string, port: number, localAddress: string, timeoutMs: number): Promise<EgressProbe['state']> {
  return new Promise((resolve) => {
    const sock = connect({ host: address, port, localAddress, timeout: timeoutMs });
    let buf = '';
    const done = (s: EgressProbe['state']) => {
      sock.destroy();
      resolve(s);
    };
    sock.setEncoding('utf8');
    sock.on('data', (chunk: string) => {
      buf += chunk;
      if (/^220[ -]/.test(buf)) done('open');
      else if (buf.includes('\n')) done('refused');
    });
    sock.on('timeout', () => done('timeout'));
    sock.on('error', (err: NodeJS.ErrnoException) => done(err.code === 'ECONNREFUSED' ? 'refused' : 'error'));
    sock.on('close', () => done(buf.startsWith('220') ? 'open' : 'refused'));
  });
}
