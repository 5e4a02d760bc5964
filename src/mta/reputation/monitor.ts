/**
 * Blocklist monitoring (mta.md → Blocklist monitoring): a sweep over every sending IP against
 * the critical zone and the warning zones. Only a confirmed critical listing quarantines an
 * address (an IpStatus mark, which select_ip honours); an `unknown` keeps the previous
 * decision, and an address never observed keeps sending, reported as `unknown` (decisions.md,
 * "Blocklist gating": a host whose resolver cannot answer the zones must still send).
 * Each sweep also takes forward-confirmed reverse DNS, which feeds select_ip's identity check.
 * Observations live in coordination so every instance's routes show the leader's sweep.
 */
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import { MTA_EVENT } from '../../shared/contracts/mta.js';
import type { MtaEvents } from '../events.js';
import type { MtaPolicy } from '../policy.js';
import { IMPLICIT_ADDRESS, type SendingPools } from '../pools.js';
import type { Logger } from '../../shared/log.js';
import { IDENTITY_REASON, type IdentityFailure, type IpStatus } from '../state/ip-status.js';
import { decodeCodes } from './data.js';
import type { ReverseDns } from './rdns.js';
import type { DnsblResolver, DnsblResult, DnsblState, UnknownCause } from './dnsbl.js';

/** IpStatus reasons the monitor owns (other marks, e.g. an operator's, are never lifted by it). */
/**
 * DNSBL_MONITOR, or its default: on in production (a listed IP must stop sending), off in
 * development and tests, where the machine's resolver may not reach the blocklists (and tests
 * must not ask them).
 */
export function monitorEnabled(config: { DNSBL_MONITOR: boolean | undefined; NODE_ENV: string }): boolean {
  return config.DNSBL_MONITOR ?? config.NODE_ENV === 'production';
}

export const BLOCK_REASON = { listed: 'dnsbl_listed' } as const;
/** The mark versions before 2026-12-07 set on never-observed addresses; lifted at start. */
const LEGACY_NOT_OBSERVED = 'dnsbl_not_observed';

export interface ZoneObservation {
  zone: string;
  severity: 'critical' | 'warning';
  /** The last lookup's answer. */
  state: DnsblState;
  codes: string[];
  lists: string[];
  cause: UnknownCause | null;
  at: number;
  /** The last answer that was not `unknown` (the decision an `unknown` keeps), and its time. */
  confirmed: 'listed' | 'clean' | null;
  confirmedAt: number | null;
}

export type Observations = Record<string, Record<string, ZoneObservation>>;

export type SnapshotState = 'ok' | 'dnsbl_listed' | 'dnsbl_partial' | 'dnsbl_unknown';

/** One address's critical-zone status as reported (metric, routes): never observed reads `unknown`. */
export type BlocklistStatus = 'listed' | 'clean' | 'unknown';

export interface SweepEntry {
  ip: string;
  pools: string[];
  zones: ZoneObservation[];
  /** After this sweep. */
  quarantined: boolean;
}

const KEY = 'persist:mta:dnsbl:observations';
const RDNS_KEY = 'persist:mta:dnsbl:rdns';

export interface MonitorDeps {
  coord: Coordination;
  clock: Clock;
  pools: SendingPools;
  ipStatus: IpStatus;
  resolver: DnsblResolver;
  events: MtaEvents;
  policy: MtaPolicy['reputation'];
  zones: { critical: string; warning: readonly string[] };
  /** DNSBL_MONITOR: sweeps and listing quarantine on, or off (nothing is looked up or gated). */
  enabled: boolean;
  log: Logger;
  /** Forward-confirmed reverse DNS of an address (taken with each sweep). */
  reverseDns(ip: string, ehloName: string): Promise<ReverseDns>;
}

export class BlocklistMonitor {
  private running: Promise<SweepEntry[]> | null = null;

  constructor(private readonly d: MonitorDeps) {}

  /** The addresses a sweep looks at (the OS-chosen wildcard has no address to look up). */
  addresses(): string[] {
    return this.d.pools.addresses.filter((a) => a !== IMPLICIT_ADDRESS);
  }

  async observations(): Promise<Observations> {
    return (await this.d.coord.getJson<Observations>(KEY)) ?? {};
  }

  async reverseDns(): Promise<Record<string, ReverseDns & { at: number }>> {
    return (await this.d.coord.getJson<Record<string, ReverseDns & { at: number }>>(RDNS_KEY)) ?? {};
  }

  /**
   * At start: lifts the "never observed" marks that versions before the gating ruling set
   * (an address with no answer yet now keeps sending); listings and operators' marks stay.
   */
  async liftLegacyGates(): Promise<void> {
    const marks = await this.d.ipStatus.marks();
    for (const [ip, b] of Object.entries(marks)) if (b.reason === LEGACY_NOT_OBSERVED) await this.d.ipStatus.unblock(ip);
  }

  /** Each address's critical-zone status per the last sweep, and every zone's, for the metric. */
  async statuses(): Promise<{ ip: string; zone: string; status: BlocklistStatus }[]> {
    const obs = await this.observations();
    const zones = [this.d.zones.critical, ...this.d.zones.warning];
    return this.addresses().flatMap((ip) => zones.map((zone) => ({ ip, zone, status: blocklistStatus(obs[ip]?.[zone]) })));
  }

  /**
   * One sweep now: every address × (critical + warning zones), then the decisions and their
   * events. A call while one runs shares it (two sweeps at once could send a transition twice).
   */
  sweep(): Promise<SweepEntry[]> {
    this.running ??= this.sweepOnce().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async sweepOnce(): Promise<SweepEntry[]> {
    const { critical, warning } = this.d.zones;
    const zones = [critical, ...warning];
    const ips = this.addresses();
    const jobs = ips.flatMap((ip) => zones.map((zone) => ({ ip, zone })));
    const [results, rdns] = await Promise.all([
      mapLimit(jobs, this.d.policy.concurrency, (j) => this.d.resolver.lookup(j.ip, j.zone)),
      mapLimit(ips, this.d.policy.concurrency, async (ip) => ({ ...(await this.d.reverseDns(ip, this.d.pools.find(ip)?.ehloName ?? '')), at: this.d.clock.now() })),
    ]);
    await this.d.coord.setJson(RDNS_KEY, Object.fromEntries(ips.map((ip, i) => [ip, rdns[i]!])));
    await this.judgeIdentity(ips, rdns);
    const prev = await this.observations();
    const next: Observations = { ...prev };
    const out: SweepEntry[] = [];
    for (const ip of ips) {
      const before = prev[ip] ?? {};
      const now: Record<string, ZoneObservation> = { ...before };
      for (const r of results.filter((x) => x.ip === ip)) now[r.zone] = this.observe(r, before[r.zone], r.zone === critical ? 'critical' : 'warning');
      next[ip] = now;
      const quarantined = await this.decide(ip, before, now);
      out.push({ ip, pools: this.poolsOf(ip), zones: zones.map((z) => now[z]!), quarantined });
    }
    await this.d.coord.setJson(KEY, next);
    const unknown = ips.filter((ip) => next[ip]?.[critical]?.state === 'unknown');
    if (unknown.length) this.d.log.warn({ ips: unknown, zone: critical }, 'blocklist status unknown (the resolver gave no answer): these addresses keep sending');
    return out;
  }

  /** select_ip's identity check: a confirmed missing or mismatched PTR takes the address out. */
  private async judgeIdentity(ips: string[], rdns: ReverseDns[]): Promise<void> {
    const observed: string[] = [];
    const failing: Record<string, IdentityFailure> = {};
    ips.forEach((ip, i) => {
      const r = rdns[i]!;
      if (r.status === 'unknown') return;
      observed.push(ip);
      if (!this.d.policy.requirePtr) return;
      if (r.status === 'missing') failing[ip] = IDENTITY_REASON.ptrMissing;
      if (r.status === 'mismatch') failing[ip] = IDENTITY_REASON.ptrMismatch;
    });
    await this.d.ipStatus.setIdentity(this.d.policy.requirePtr ? observed : ips, failing);
  }

  /** The routing snapshot state of a pool (mta.md: dnsbl_listed, dnsbl_partial, dnsbl_unknown). */
  async snapshot(pool: string): Promise<SnapshotState> {
    const ips = (this.d.pools.pools.get(pool) ?? []).map((i) => i.address).filter((a) => a !== IMPLICIT_ADDRESS);
    if (ips.length === 0) return 'ok';
    const blocked = await this.d.ipStatus.marks();
    const obs = await this.observations();
    const listed = ips.filter((ip) => blocked[ip]?.reason === BLOCK_REASON.listed);
    if (listed.length === ips.length) return 'dnsbl_listed';
    if (listed.length > 0) return 'dnsbl_partial';
    const unknown = ips.some((ip) => {
      const o = obs[ip]?.[this.d.zones.critical];
      return !o || o.state === 'unknown';
    });
    return this.d.enabled && unknown ? 'dnsbl_unknown' : 'ok';
  }

  private observe(r: DnsblResult, before: ZoneObservation | undefined, severity: 'critical' | 'warning'): ZoneObservation {
    const confirmed = r.state === 'unknown' ? (before?.confirmed ?? null) : r.state;
    return {
      zone: r.zone,
      severity,
      state: r.state,
      codes: r.codes,
      lists: r.state === 'listed' ? decodeCodes(r.zone, r.codes, this.d.zones.critical) : [],
      cause: r.cause,
      at: r.at,
      confirmed,
      confirmedAt: r.state === 'unknown' ? (before?.confirmedAt ?? null) : r.at,
    };
  }

  private async decide(ip: string, before: Record<string, ZoneObservation>, now: Record<string, ZoneObservation>): Promise<boolean> {
    const { critical } = this.d.zones;
    const blocked = (await this.d.ipStatus.marks())[ip];
    // Events on every confirmed transition, per zone; warning zones are advisory (no quarantine).
    for (const [zone, o] of Object.entries(now)) {
      const was = before[zone]?.confirmed ?? null;
      if (o.state === 'listed' && was !== 'listed') await this.emit(MTA_EVENT.ipBlocklisted, ip, o);
      if (o.state === 'clean' && was === 'listed') await this.emit(MTA_EVENT.ipDelisted, ip, o);
    }
    const c = now[critical]!;
    if (c.state === 'listed') {
      // An operator's mark stays as it is; the listing is recorded once.
      if (blocked === undefined) await this.d.ipStatus.markBlocked(ip, BLOCK_REASON.listed, critical);
      return true;
    }
    if (c.state === 'clean' && blocked?.reason === BLOCK_REASON.listed) await this.d.ipStatus.unblock(ip);
    // unknown: the previous decision stands; an address never observed keeps sending.
    return (await this.d.ipStatus.marks())[ip] !== undefined;
  }

  private async emit(event: typeof MTA_EVENT.ipBlocklisted | typeof MTA_EVENT.ipDelisted, ip: string, o: ZoneObservation): Promise<void> {
    await this.d.events.emit(event, {
      ip,
      zone: o.zone,
      pools: this.poolsOf(ip),
      at: new Date(o.at).toISOString(),
      severity: o.severity,
      quarantined: event === MTA_EVENT.ipBlocklisted && o.severity === 'critical',
      codes: o.codes,
      lists: o.lists,
    });
  }

  private poolsOf(ip: string): string[] {
    return [...this.d.pools.pools.entries()].filter(([, ips]) => ips.some((i) => i.address === ip)).map(([p]) => p);
  }
}

/** An observation's reported status: a lookup that never answered, or never ran, is `unknown`. */
export function blocklistStatus(o: ZoneObservation | undefined): BlocklistStatus {
  if (!o || o.state === 'unknown') return 'unknown';
  return o.state;
}

/** Runs `fn` over `items` with at most `limit` in flight, results in order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
