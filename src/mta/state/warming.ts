import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import { warmingCap, type AdaptiveWarmingPolicy, type MtaPolicy, type WarmingThresholds } from '../policy.js';
import { DAY_MS, dayStamp, utcDayStart } from './keys.js';
import type { VolumePressureVerdict } from './volume-pressure.js';

export interface WarmingState {
  /** UTC day start (epoch ms) of the IP's day 1. */
  startDay: number;
  graduatedAt: number | null;
  /** The schedule day that applies on `evaluatedDay` (adaptive: runs ahead of or behind the calendar). */
  scheduleDay?: number;
  /** UTC day start up to which the days were judged. */
  evaluatedDay?: number;
  /** The verdict of the last judged day. */
  verdict?: DayVerdict;
}

export type DayVerdict = 'insufficient_data' | 'accelerate' | 'steady' | 'decelerate';
export type ProviderVerdict = 'insufficient_data' | 'clean' | 'decelerate';

/** Per (IP, provider): mta.md → per-provider multiplier. */
export interface ProviderState {
  multiplier: number;
  /** Clean days banked since the last change or breach. */
  streak: number;
  evaluatedDay: number;
  verdict: ProviderVerdict | null;
}

export interface PressureEvent {
  at: number;
  verdict: VolumePressureVerdict;
}

export interface ProviderView {
  provider: string;
  multiplier: number;
  cap: number | null;
  /** Delivered today at this IP to this provider. */
  sentToday: number;
  verdict: ProviderVerdict | null;
  streak: number;
  pressure: { at: string; verdict: VolumePressureVerdict }[];
}

export interface WarmingView {
  ip: string;
  warmed: boolean;
  day: number | null;
  cap: number | null;
  sentToday: number;
  graduatedAt: number | null;
  verdict: DayVerdict | null;
  pacing: { bulkCeiling: number; allowance: number; bulkSentToday: number; position: number } | null;
  providers: ProviderView[];
}

export type WarmingResult =
  | { ok: true; release: (() => Promise<unknown>) | null; graduated: boolean }
  | { ok: false; delayMs: number; day: number; cap: number; reason: 'warming_cap' | 'provider_cap' | 'pacing' };

export interface ReserveInput {
  /** Provider key (warming.providerOf). */
  provider?: string;
  /** The attempt's pool; pools of policy.adaptiveWarming.pacing.bulkPools are paced. */
  pool?: string;
  jobId?: string;
}

export type ResultKind = 'sent' | 'bounced' | 'deferred';

const COUNTER_TTL_MS = 3 * DAY_MS;
const PROVIDER_CACHE_MS = 60_000;
const CACHE_MAX = 10_000;

/**
 * IP warming (phase 10, mta.md → Warming cap behaviour). Per IP: a daily cap from the schedule
 * at the IP's schedule day, which advances once per UTC day by the verdict on the day before
 * (accelerate, steady, decelerate; too few results: one day, like the calendar). Per (IP,
 * provider): a multiplier on that cap, moved once per UTC day. Bulk pools are paced along the
 * day. Volume-pressure replies are kept per (IP, provider) for the retry delay and the
 * multiplier. Every key is `persist:`: Redis for a fleet, else written to PostgreSQL with the
 * other counters and reloaded at start.
 */
export class Warming {
  private seq = 0;
  private readonly a: AdaptiveWarmingPolicy;
  /**
   * An IP's schedule day and a pair's multiplier move only at a UTC day's first attempt, so an
   * instance keeps the day's values: the common reservation then costs two counter round trips,
   * as before warming adapted. (A pair without state is unrestricted, like one at 1, so a cached
   * null stays right when its first result creates the state.)
   */
  private readonly today = new Map<string, { day: number; value: unknown }>();
  /** Recipient domain → provider, for a minute (the MX mapping changes rarely). */
  private readonly providers = new Map<string, { until: number; provider: string }>();

  constructor(
    private readonly coord: Coordination,
    private readonly clock: Clock,
    private readonly policy: MtaPolicy,
    private readonly warmed: ReadonlySet<string>,
    private readonly instanceId: string,
    private readonly onGraduate: (ip: string, state: WarmingState, day: number) => void,
    /** Profile key of a recipient domain (`default` when no profile names it). */
    private readonly profileOf: (domain: string) => string = () => 'default',
  ) {
    this.a = policy.adaptiveWarming;
  }

  private stateKey = (ip: string) => `persist:mta:warm:${ip}`;
  private countKey = (ip: string, now: number) => `persist:mta:warm:${ip}:${dayStamp(now)}`;
  private bulkKey = (ip: string, now: number) => `persist:mta:warm:${ip}:bulk:${dayStamp(now)}`;
  private resultKey = (ip: string, day: number, kind: ResultKind) => `persist:mta:warm:${ip}:r:${dayStamp(day)}:${kind}`;
  private provKey = (ip: string, p: string) => `persist:mta:warm:${ip}:p:${p}`;
  private provCountKey = (ip: string, p: string, now: number) => `persist:mta:warm:${ip}:p:${p}:${dayStamp(now)}`;
  private provResultKey = (ip: string, p: string, day: number, kind: ResultKind | 'pressure') => `persist:mta:warm:${ip}:p:${p}:r:${dayStamp(day)}:${kind}`;
  private pressureKey = (ip: string, p: string) => `persist:mta:warm:${ip}:p:${p}:pressure`;
  private providersKey = (ip: string) => `persist:mta:warm:${ip}:providers`;
  private holdKey = (jobId: string) => `persist:mta:warm:hold:${jobId}`;
  private mxKey = (domain: string) => `persist:mta:warm:mx:${domain}`;

  /** Calendar day of the IP (1-based). */
  static dayOf(state: WarmingState, now: number): number {
    return Math.floor((utcDayStart(now) - state.startDay) / DAY_MS) + 1;
  }

  /** The provider of a recipient domain: its ISP profile, else the provider its MX was seen at. */
  async providerOf(domain: string): Promise<string> {
    const p = this.profileOf(domain);
    if (p !== 'default') return p;
    const now = this.clock.now();
    const c = this.providers.get(domain);
    if (c && c.until > now) return c.provider;
    const provider = (await this.coord.getJson<string>(this.mxKey(domain))) ?? p;
    if (this.providers.size >= CACHE_MAX) this.providers.clear();
    this.providers.set(domain, { until: now + PROVIDER_CACHE_MS, provider });
    return provider;
  }

  private async forToday<T>(key: string, now: number, load: () => Promise<T>, keep: (v: T) => boolean): Promise<T> {
    const day = utcDayStart(now);
    const c = this.today.get(key);
    if (c && c.day === day) return c.value as T;
    const value = await load();
    if (keep(value)) {
      if (this.today.size >= CACHE_MAX) this.today.clear();
      this.today.set(key, { day, value });
    }
    return value;
  }

  /** Remembers a domain hosted by a known provider (MX host suffix), for domains no profile names. */
  async learnMx(domain: string, mxHost: string | undefined): Promise<void> {
    if (!mxHost || this.profileOf(domain) !== 'default') return;
    const host = `.${mxHost.toLowerCase().replace(/\.$/, '')}`;
    const hit = this.a.providerMx.find((m) => m.mxSuffixes.some((s) => host.endsWith(s)));
    if (!hit) return;
    this.providers.set(domain, { until: this.clock.now() + PROVIDER_CACHE_MS, provider: hit.provider });
    if ((await this.coord.getJson<string>(this.mxKey(domain))) !== hit.provider) await this.coord.setJson(this.mxKey(domain), hit.provider, 7 * DAY_MS);
  }

  async reserve(ip: string, input: ReserveInput = {}): Promise<WarmingResult> {
    if (this.warmed.has(ip)) return { ok: true, release: null, graduated: true };
    const now = this.clock.now();
    const s = await this.forToday(`ip:${ip}`, now, () => this.ipState(ip, now, true), (v) => v.graduatedAt === null);
    const day = s.scheduleDay!;
    const cap = warmingCap(this.policy, day);
    if (cap === Infinity) {
      if (s.graduatedAt === null) await this.graduate(ip, s, day, now);
      return { ok: true, release: null, graduated: true };
    }
    const undo: string[] = [];
    const giveBack = () => Promise.all(undo.map((k) => this.coord.incr(k, -1, COUNTER_TTL_MS)));
    const refuse = async (delayMs: number, reason: 'warming_cap' | 'provider_cap' | 'pacing'): Promise<WarmingResult> => {
      await giveBack();
      // A retry whose earlier attempt kept its slot today (a remote deferral) was counted
      // already: it passes all three gates. Looked up only here, off the common path.
      if (input.jobId) {
        const hold = await this.coord.getJson<{ ip: string; day: number }>(this.holdKey(input.jobId));
        if (hold && hold.ip === ip && hold.day === utcDayStart(now)) {
          await this.coord.setJson(this.holdKey(input.jobId), null, 1);
          return { ok: true, release: null, graduated: false };
        }
      }
      return { ok: false, delayMs: this.boundDelay(delayMs, now), day, cap, reason };
    };
    const nextDay = utcDayStart(now) + DAY_MS - now;

    if (input.provider) {
      const p = await this.forToday(`p:${ip}:${input.provider}`, now, () => this.providerState(ip, input.provider!, now), () => true);
      if (p && p.multiplier < 1) {
        const k = this.provCountKey(ip, input.provider, now);
        undo.push(k);
        if ((await this.coord.incr(k, 1, COUNTER_TTL_MS)) > Math.floor(cap * p.multiplier)) return refuse(nextDay, 'provider_cap');
      }
    }
    const key = this.countKey(ip, now);
    undo.push(key);
    if ((await this.coord.incr(key, 1, COUNTER_TTL_MS)) > cap) return refuse(nextDay, 'warming_cap');

    if (input.pool !== undefined && this.a.pacing.bulkPools.includes(input.pool)) {
      const bk = this.bulkKey(ip, now);
      undo.push(bk);
      const n = await this.coord.incr(bk, 1, COUNTER_TTL_MS);
      const curve = this.pacing(cap, now);
      if (n > curve.allowance) return refuse(n > curve.bulkCeiling ? nextDay : this.untilAllowed(cap, n, now), 'pacing');
    }
    return { ok: true, release: giveBack, graduated: false };
  }

  /** Deferral bounded as mta.md says (one hour at most) and by the policy's minimum. */
  private boundDelay(ms: number, now: number): number {
    const w = this.policy.warming;
    return Math.min(w.maxDeferMs, Math.max(w.minDeferMs, Math.min(ms, utcDayStart(now) + DAY_MS - now)));
  }

  /** The pacing curve: bulk sends released so far today (linear from startFraction at 00:00 to the bulk ceiling at 24:00). */
  pacing(cap: number, now: number): { bulkCeiling: number; allowance: number; position: number } {
    const p = this.a.pacing;
    const bulkCeiling = Math.floor(cap * (1 - p.transactionalHeadroom));
    const position = (now - utcDayStart(now)) / DAY_MS;
    const curve = Math.floor(bulkCeiling * (p.startFraction + (1 - p.startFraction) * position));
    return { bulkCeiling, allowance: Math.min(bulkCeiling, Math.max(p.minBulkAvailable, curve)), position };
  }

  /** Time until the curve releases the n-th bulk send of the day. */
  private untilAllowed(cap: number, n: number, now: number): number {
    const p = this.a.pacing;
    const bulkCeiling = Math.floor(cap * (1 - p.transactionalHeadroom));
    const position = (n / bulkCeiling - p.startFraction) / (1 - p.startFraction);
    return Math.ceil(utcDayStart(now) + position * DAY_MS - now);
  }

  /**
   * A delivery result at `ip` for the provider: counted for the day's verdicts; a volume-pressure
   * verdict is kept for the retry delay. A remote deferral keeps the job's slot (`jobId`).
   */
  async record(ip: string, provider: string, kind: ResultKind, pressure: VolumePressureVerdict | null, jobId?: string): Promise<void> {
    if (this.warmed.has(ip)) return;
    const now = this.clock.now();
    const today = utcDayStart(now);
    // Counted for verdicts read once a day: the fleet may see them a second late.
    this.coord.addLater(this.resultKey(ip, today, kind), 1, COUNTER_TTL_MS);
    this.coord.addLater(this.provResultKey(ip, provider, today, kind), 1, COUNTER_TTL_MS);
    const cached = this.today.get(`p:${ip}:${provider}`);
    if (!(cached?.day === today && cached.value) && !(await this.coord.getJson<ProviderState>(this.provKey(ip, provider)))) {
      const fresh: ProviderState = { multiplier: this.a.provider.max, streak: 0, evaluatedDay: today, verdict: null };
      await this.coord.setJson(this.provKey(ip, provider), fresh);
      this.today.set(`p:${ip}:${provider}`, { day: today, value: fresh });
      const list = (await this.coord.getJson<string[]>(this.providersKey(ip))) ?? [];
      if (!list.includes(provider)) await this.coord.setJson(this.providersKey(ip), [...list, provider]);
    }
    if (kind === 'deferred' && jobId) await this.coord.setJson(this.holdKey(jobId), { ip, day: today }, today + DAY_MS - now);
    if (pressure) {
      await this.coord.incr(this.provResultKey(ip, provider, today, 'pressure'), 1, COUNTER_TTL_MS);
      const h = this.a.pressure;
      const recent = (await this.pressure(ip, provider, now)).concat({ at: now, verdict: pressure }).slice(-h.maxEvents);
      await this.coord.setJson(this.pressureKey(ip, provider), recent, h.horizonMs);
    }
  }

  private async pressure(ip: string, provider: string, now: number): Promise<PressureEvent[]> {
    const all = (await this.coord.getJson<PressureEvent[]>(this.pressureKey(ip, provider))) ?? [];
    return all.filter((e) => e.at > now - this.a.pressure.horizonMs);
  }

  /** The suggested retry delay: `baseMs` doubled per recent volume-pressure event, at most ×maxFactor and maxDelayMs. */
  async retryDelay(ip: string, provider: string, baseMs: number): Promise<number> {
    const n = (await this.pressure(ip, provider, this.clock.now())).length;
    if (n === 0) return baseMs;
    const h = this.a.pressure;
    return Math.max(baseMs, Math.min(h.maxDelayMs, baseMs * Math.min(h.maxFactor, 2 ** n)));
  }

  private verdictOf(t: WarmingThresholds, sent: number, bounced: number, deferred: number): 'insufficient_data' | 'accelerate' | 'steady' | 'decelerate' {
    const total = sent + bounced + deferred;
    if (total < t.minSample) return 'insufficient_data';
    const b = bounced / total;
    const d = deferred / total;
    if (b > t.decelerate.bounceRate || d > t.decelerate.deferralRate) return 'decelerate';
    if (b <= t.accelerate.maxBounceRate && d <= t.accelerate.maxDeferralRate) return 'accelerate';
    return 'steady';
  }

  private async dayResults(keys: (kind: ResultKind) => string): Promise<[number, number, number]> {
    const [s, b, d] = await this.coord.getCounters([keys('sent'), keys('bounced'), keys('deferred')]);
    return [s, b, d];
  }

  /** The IP's state, with the days since the last evaluation judged (once per UTC day). */
  private async ipState(ip: string, now: number, create: boolean): Promise<WarmingState> {
    const today = utcDayStart(now);
    let s = await this.coord.getJson<WarmingState>(this.stateKey(ip));
    if (!s) {
      s = { startDay: today, graduatedAt: null, scheduleDay: 1, evaluatedDay: today };
      if (create) await this.coord.setJson(this.stateKey(ip), s);
      return s;
    }
    // A state written before the schedule adapted: the calendar day until now.
    if (s.scheduleDay === undefined || s.evaluatedDay === undefined) s = { ...s, scheduleDay: Warming.dayOf(s, now), evaluatedDay: today };
    if (s.evaluatedDay! >= today || s.graduatedAt !== null) return s;
    const next = { ...s };
    const w = this.a;
    for (let d = next.evaluatedDay!; d < today; d += DAY_MS) {
      const [sent, bounced, deferred] = await this.dayResults((k) => this.resultKey(ip, d, k));
      const v = this.verdictOf(w.thresholds, sent, bounced, deferred);
      const step = v === 'accelerate' ? w.accelerateDays : v === 'decelerate' ? w.decelerateDays : 1;
      next.scheduleDay = Math.min(this.policy.warming.graduateDay, Math.max(1, next.scheduleDay! + step));
      next.verdict = v;
    }
    next.evaluatedDay = today;
    // One instance judges a day; another reads its result (or, briefly, the same computation).
    if (await this.coord.acquireLease(`mta:warm:eval:${ip}:${today}`, `${this.instanceId}:${++this.seq}`, DAY_MS)) await this.coord.setJson(this.stateKey(ip), next);
    return next;
  }

  /** The (IP, provider) state with the days since its last evaluation judged; null: no recorded state (unrestricted). */
  private async providerState(ip: string, provider: string, now: number): Promise<ProviderState | null> {
    const today = utcDayStart(now);
    const p = await this.coord.getJson<ProviderState>(this.provKey(ip, provider));
    if (!p || p.evaluatedDay >= today) return p;
    const next = { ...p };
    const r = this.a.provider;
    for (let d = p.evaluatedDay; d < today; d += DAY_MS) {
      const [sent, bounced, deferred] = await this.dayResults((k) => this.provResultKey(ip, provider, d, k));
      const pressure = await this.coord.getCounter(this.provResultKey(ip, provider, d, 'pressure'));
      const v = this.verdictOf(this.a.thresholds, sent, bounced, deferred);
      if (v === 'insufficient_data') next.verdict = 'insufficient_data';
      else if (v === 'decelerate' || pressure > 0) {
        next.verdict = 'decelerate';
        next.multiplier = Math.max(r.min, round2(next.multiplier * r.decreaseFactor));
        next.streak = 0;
      } else {
        next.verdict = 'clean';
        next.streak++;
        if (next.streak >= r.cleanDaysToRecover) {
          if (next.multiplier < r.max) next.multiplier = Math.min(r.max, round2(next.multiplier + r.recoverStep));
          next.streak = 0;
        }
      }
    }
    next.evaluatedDay = today;
    if (await this.coord.acquireLease(`mta:warm:peval:${ip}:${provider}:${today}`, `${this.instanceId}:${++this.seq}`, DAY_MS)) {
      await this.coord.setJson(this.provKey(ip, provider), next);
    }
    return next;
  }

  private async graduate(ip: string, s: WarmingState, day: number, now: number): Promise<void> {
    const owner = `${this.instanceId}:${++this.seq}`;
    if (!(await this.coord.acquireLease(`mta:warm:graduate:${ip}:${s.startDay}`, owner, 7 * DAY_MS))) return;
    const next = { ...s, graduatedAt: now };
    await this.coord.setJson(this.stateKey(ip), next);
    this.today.delete(`ip:${ip}`);
    this.onGraduate(ip, next, day);
  }

  async view(ip: string): Promise<WarmingView> {
    const now = this.clock.now();
    const sentToday = await this.coord.getCounter(this.countKey(ip, now));
    const empty = { verdict: null, pacing: null, providers: [] };
    if (this.warmed.has(ip)) return { ip, warmed: true, day: null, cap: null, sentToday, graduatedAt: null, ...empty };
    const exists = await this.coord.getJson<WarmingState>(this.stateKey(ip));
    const s = await this.ipState(ip, now, false);
    const day = exists ? s.scheduleDay! : null;
    const cap = warmingCap(this.policy, s.scheduleDay!);
    const graduated = cap === Infinity;
    const providers: ProviderView[] = [];
    for (const provider of (await this.coord.getJson<string[]>(this.providersKey(ip))) ?? []) {
      const p = await this.providerState(ip, provider, now);
      if (!p) continue;
      providers.push({
        provider,
        multiplier: p.multiplier,
        cap: graduated ? null : Math.floor(cap * p.multiplier),
        sentToday: await this.coord.getCounter(this.provResultKey(ip, provider, utcDayStart(now), 'sent')),
        verdict: p.verdict,
        streak: p.streak,
        pressure: (await this.pressure(ip, provider, now)).map((e) => ({ at: new Date(e.at).toISOString(), verdict: e.verdict })),
      });
    }
    const curve = graduated ? null : { ...this.pacing(cap, now), bulkSentToday: await this.coord.getCounter(this.bulkKey(ip, now)) };
    return {
      ip,
      warmed: s.graduatedAt !== null,
      day,
      cap: graduated ? null : cap,
      sentToday,
      graduatedAt: s.graduatedAt,
      verdict: s.verdict ?? null,
      pacing: curve,
      providers,
    };
  }
}

const round2 = (x: number) => Math.round(x * 100) / 100;
