import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import { warmingCap, type MtaPolicy } from '../policy.js';
import { DAY_MS, dayStamp, utcDayStart } from './keys.js';

export interface WarmingState {
  /** UTC day start (epoch ms) of the IP's day 1. */
  startDay: number;
  graduatedAt: number | null;
}

export interface WarmingView {
  ip: string;
  warmed: boolean;
  day: number | null;
  cap: number | null;
  sentToday: number;
  graduatedAt: number | null;
}

export type WarmingResult =
  | { ok: true; release: (() => Promise<unknown>) | null; graduated: boolean }
  | { ok: false; delayMs: number; day: number; cap: number };

const COUNTER_TTL_MS = 2 * DAY_MS;

/**
 * IP warming (phase 10): per-IP daily cap from the schedule, counted per UTC day. An IP's day
 * 1 is the UTC day of its first send (or it is listed in MTA_WARMED_IPS and never capped). The
 * state and counters are `persist:` keys. Provider multipliers, intraday pacing and
 * deferral-aware retry plug in here later (see docs/mta.md).
 */
export class Warming {
  private seq = 0;

  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
    private readonly warmed: ReadonlySet<string>,
    private readonly instanceId: string,
    private readonly onGraduate: (ip: string, state: WarmingState, day: number) => void,
  ) {}

  private stateKey = (ip: string) => `persist:mta:warm:${ip}`;
  private countKey = (ip: string, now: number) => `persist:mta:warm:${ip}:${dayStamp(now)}`;

  static dayOf(state: WarmingState, now: number): number {
    return Math.floor((utcDayStart(now) - state.startDay) / DAY_MS) + 1;
  }

  async reserve(ip: string): Promise<WarmingResult> {
    if (this.warmed.has(ip)) return { ok: true, release: null, graduated: true };
    const now = this.clock.now();
    let s = await this.coord.getJson<WarmingState>(this.stateKey(ip));
    if (!s) {
      s = { startDay: utcDayStart(now), graduatedAt: null };
      await this.coord.setJson(this.stateKey(ip), s);
    }
    const day = Warming.dayOf(s, now);
    const cap = warmingCap(this.policy, day);
    if (cap === Infinity) {
      if (s.graduatedAt === null) await this.graduate(ip, s, day, now);
      return { ok: true, release: null, graduated: true };
    }
    const key = this.countKey(ip, now);
    const n = await this.coord.incr(key, 1, COUNTER_TTL_MS);
    if (n > cap) {
      await this.coord.incr(key, -1, COUNTER_TTL_MS);
      const w = this.policy.warming;
      const delayMs = Math.min(w.maxDeferMs, Math.max(w.minDeferMs, utcDayStart(now) + DAY_MS - now));
      return { ok: false, delayMs, day, cap };
    }
    return { ok: true, release: () => this.coord.incr(key, -1, COUNTER_TTL_MS), graduated: false };
  }

  private async graduate(ip: string, s: WarmingState, day: number, now: number): Promise<void> {
    const owner = `${this.instanceId}:${++this.seq}`;
    if (!(await this.coord.acquireLease(`mta:warm:graduate:${ip}:${s.startDay}`, owner, 7 * DAY_MS))) return;
    const next = { ...s, graduatedAt: now };
    await this.coord.setJson(this.stateKey(ip), next);
    this.onGraduate(ip, next, day);
  }

  async view(ip: string): Promise<WarmingView> {
    const now = this.clock.now();
    const sentToday = await this.coord.getCounter(this.countKey(ip, now));
    if (this.warmed.has(ip)) return { ip, warmed: true, day: null, cap: null, sentToday, graduatedAt: null };
    const s = await this.coord.getJson<WarmingState>(this.stateKey(ip));
    if (!s) return { ip, warmed: false, day: null, cap: warmingCap(this.policy, 1), sentToday, graduatedAt: null };
    const day = Warming.dayOf(s, now);
    const cap = warmingCap(this.policy, day);
    return { ip, warmed: s.graduatedAt !== null, day, cap: cap === Infinity ? null : cap, sentToday, graduatedAt: s.graduatedAt };
  }
}
