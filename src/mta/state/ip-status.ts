import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { SendingPools } from '../pools.js';

export interface IpBlock {
  reason: string;
  /** Blocklist zone when a listing caused it. */
  zone?: string;
  since: number;
}

/** One change of an address's mark or identity failure, for GET /ip-reputation/:ip's history. */
export interface IpMarkChange {
  at: number;
  action: 'blocked' | 'unblocked';
  reason: string;
  zone: string | null;
}

const KEY = 'persist:mta:ips:blocked';
const IDENTITY_KEY = 'persist:mta:ips:identity';

/** Identity readiness failures select_ip honours (mta.md phase 8: "excluding IPs failing readiness checks"). */
export const IDENTITY_REASON = { ptrMissing: 'ptr_missing', ptrMismatch: 'ptr_mismatch' } as const;
export type IdentityFailure = (typeof IDENTITY_REASON)[keyof typeof IDENTITY_REASON];
const historyKey = (ip: string) => `persist:mta:ips:history:${ip}`;

/**
 * Readiness of sending IPs for select_ip: configured, not marked blocked, and not failing an
 * identity check. Two shared maps: marks (the blocklist monitor's or an operator's) and
 * identity failures (a confirmed missing or mismatched PTR, set from each sweep). `blocked()`
 * is their union, marks first, so every reader (select_ip, emergency mode, the routes) sees one
 * answer. Each instance reads them at most once per `cacheMs`, which bounds how late a change is seen.
 */
export class IpStatus {
  private cached: { at: number; marks: Record<string, IpBlock>; map: Record<string, IpBlock> } | null = null;

  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly pools: SendingPools,
    private readonly opts: { cacheMs?: number; historyEntries?: number } = {},
  ) {}

  private get cacheMs(): number {
    return this.opts.cacheMs ?? 1_000;
  }

  /** Every address out of its pool, with the reason: a mark, else an identity failure. */
  async blocked(): Promise<Record<string, IpBlock>> {
    return (await this.load()).map;
  }

  /** The marks alone (what markBlocked/unblock change), without identity failures. */
  async marks(): Promise<Record<string, IpBlock>> {
    return (await this.load()).marks;
  }

  private async load() {
    const now = this.clock.now();
    if (this.cached && now - this.cached.at < this.cacheMs && now >= this.cached.at) return this.cached;
    const [marks, identity] = await Promise.all([
      this.coord.getJson<Record<string, IpBlock>>(KEY).then((m) => m ?? {}),
      this.coord.getJson<Record<string, IpBlock>>(IDENTITY_KEY).then((m) => m ?? {}),
    ]);
    this.cached = { at: now, marks, map: { ...identity, ...marks } };
    return this.cached;
  }

  async markBlocked(ip: string, reason: string, zone?: string): Promise<void> {
    const map = { ...((await this.coord.getJson<Record<string, IpBlock>>(KEY)) ?? {}) };
    const was = map[ip];
    map[ip] = zone ? { reason, zone, since: this.clock.now() } : { reason, since: this.clock.now() };
    await this.coord.setJson(KEY, map);
    this.cached = null;
    if (was?.reason !== reason || was?.zone !== zone) await this.note(ip, { at: this.clock.now(), action: 'blocked', reason, zone: zone ?? null });
  }

  async unblock(ip: string): Promise<void> {
    const map = { ...((await this.coord.getJson<Record<string, IpBlock>>(KEY)) ?? {}) };
    const was = map[ip];
    delete map[ip];
    await this.coord.setJson(KEY, map);
    this.cached = null;
    if (was) await this.note(ip, { at: this.clock.now(), action: 'unblocked', reason: was.reason, zone: was.zone ?? null });
  }

  /** The address's mark changes, newest first (the last `historyEntries`). */
  async history(ip: string): Promise<IpMarkChange[]> {
    return [...((await this.coord.getJson<IpMarkChange[]>(historyKey(ip))) ?? [])].reverse();
  }

  private async note(ip: string, change: IpMarkChange): Promise<void> {
    const keep = this.opts.historyEntries ?? 50;
    const list = [...((await this.coord.getJson<IpMarkChange[]>(historyKey(ip))) ?? []), change];
    await this.coord.setJson(historyKey(ip), list.slice(-keep));
  }

  /**
   * Identity failures after a sweep: `failing` names each address whose PTR was confirmed
   * missing or mismatched; an address absent from `observed` (its lookup failed) keeps its
   * previous state, so a resolver outage neither ejects nor readmits anything.
   */
  async setIdentity(observed: readonly string[], failing: Record<string, IdentityFailure>): Promise<void> {
    const before = (await this.coord.getJson<Record<string, IpBlock>>(IDENTITY_KEY)) ?? {};
    const next: Record<string, IpBlock> = {};
    for (const [ip, b] of Object.entries(before)) if (!observed.includes(ip)) next[ip] = b;
    for (const [ip, reason] of Object.entries(failing)) next[ip] = before[ip]?.reason === reason ? before[ip]! : { reason, since: this.clock.now() };
    await this.coord.setJson(IDENTITY_KEY, next);
    this.cached = null;
    const at = this.clock.now();
    for (const [ip, b] of Object.entries(next)) if (before[ip] !== b) await this.note(ip, { at, action: 'blocked', reason: b.reason, zone: null });
    for (const [ip, b] of Object.entries(before)) if (!next[ip]) await this.note(ip, { at, action: 'unblocked', reason: b.reason, zone: null });
  }

  /**
   * Emergency mode for one pool: every address of it is blocked, and the failover relay (when
   * configured) does not take over, which it does only for a pool wholly listed on the critical zone.
   */
  async poolHalted(pool: string, failoverRelay: boolean): Promise<boolean> {
    const ips = this.pools.pools.get(pool) ?? [];
    if (ips.length === 0) return false;
    const map = await this.blocked();
    if (!ips.every((i) => map[i.address] !== undefined)) return false;
    return !(failoverRelay && ips.every((i) => map[i.address]!.reason === 'dnsbl_listed'));
  }

  /** Emergency mode: every configured address is blocked. */
  async allBlocked(): Promise<boolean> {
    const map = await this.blocked();
    return this.pools.addresses.every((a) => map[a] !== undefined);
  }
}
