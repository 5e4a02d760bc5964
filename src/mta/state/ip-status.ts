import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { SendingPools } from '../pools.js';

export interface IpBlock {
  reason: string;
  /** Blocklist zone when a listing caused it. */
  zone?: string;
  since: number;
}

const KEY = 'persist:mta:ips:blocked';

/**
 * Readiness of sending IPs for select_ip: for now "configured and not marked blocked". The
 * marks are one shared map (set by the blocklist monitor of a later issue, or by operators);
 * each instance reads it at most once per `cacheMs`, which bounds how late a mark is seen.
 */
export class IpStatus {
  private cached: { at: number; map: Record<string, IpBlock> } | null = null;

  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly pools: SendingPools,
    private readonly cacheMs = 1_000,
  ) {}

  async blocked(): Promise<Record<string, IpBlock>> {
    const now = this.clock.now();
    if (this.cached && now - this.cached.at < this.cacheMs && now >= this.cached.at) return this.cached.map;
    const map = (await this.coord.getJson<Record<string, IpBlock>>(KEY)) ?? {};
    this.cached = { at: now, map };
    return map;
  }

  async markBlocked(ip: string, reason: string, zone?: string): Promise<void> {
    const map = { ...((await this.coord.getJson<Record<string, IpBlock>>(KEY)) ?? {}) };
    map[ip] = zone ? { reason, zone, since: this.clock.now() } : { reason, since: this.clock.now() };
    await this.coord.setJson(KEY, map);
    this.cached = null;
  }

  async unblock(ip: string): Promise<void> {
    const map = { ...((await this.coord.getJson<Record<string, IpBlock>>(KEY)) ?? {}) };
    delete map[ip];
    await this.coord.setJson(KEY, map);
    this.cached = null;
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
