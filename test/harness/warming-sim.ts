/**
 * Warming simulation: drives the real Warming state (src/mta/state/warming.ts) on a manual
 * clock through N UTC days of sends for one new IP, each provider answering from a script, and
 * every temporary reply classified by the real volume-pressure rules. Used by the warming
 * tests and `npm run bench:warming`.
 */
import { ManualClock } from '../../src/shared/clock.js';
import { MemoryCoordination } from '../../src/shared/coord/memory.js';
import { DEFAULT_POLICY, type MtaPolicy } from '../../src/mta/policy.js';
import { VolumePressureRules } from '../../src/mta/state/volume-pressure.js';
import { Warming, type WarmingState } from '../../src/mta/state/warming.js';

export const DAY = 86_400_000;
export const HOUR = 3_600_000;

export type Deferral = { kind: 'deferred'; code: number; response: string };
export type Answer = { kind: 'sent' } | { kind: 'bounced' } | Deferral;
export const SENT: Answer = { kind: 'sent' };
export const GMAIL_421: Deferral = {
  kind: 'deferred',
  code: 421,
  response:
    '421-4.7.28 [127.0.0.3] Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited. gsmtp',
};

export interface ProviderScript {
  provider: string;
  /** Pool of its traffic (campaign is paced, transactional is not). */
  pool: string;
  /** Sends wanted on calendar day `day` (1-based). */
  demand(day: number): number;
  /** The provider's answer to the i-th send of the day. */
  answer(day: number, i: number): Answer;
}

export interface ProviderDay {
  wanted: number;
  accepted: number;
  deferredByUs: number;
  multiplier: number;
  verdict: string | null;
  streak: number;
}

export interface SimDay {
  day: number;
  scheduleDay: number | null;
  cap: number | null;
  sent: number;
  providers: Record<string, ProviderDay>;
}

export interface Simulation {
  clock: ManualClock;
  coord: MemoryCoordination;
  warming: Warming;
  graduations: { ip: string; state: WarmingState; day: number }[];
  days: SimDay[];
  run(days: number): Promise<SimDay[]>;
}

/** Sends are offered in `rounds` equal slices across each UTC day (the pacing curve moves between them). */
export function simulation(opts: { ip?: string; providers: ProviderScript[]; start?: number; policy?: MtaPolicy; rounds?: number }): Simulation {
  const ip = opts.ip ?? '127.0.0.3';
  const clock = new ManualClock(opts.start ?? Date.UTC(2026, 10, 1));
  const coord = new MemoryCoordination({ clock });
  const rules = new VolumePressureRules();
  const graduations: Simulation['graduations'] = [];
  const known = new Set(opts.providers.map((p) => p.provider));
  const warming = new Warming(coord, clock, opts.policy ?? DEFAULT_POLICY, new Set(), 'sim', (i, state, day) => graduations.push({ ip: i, state, day }), (d) =>
    known.has(d) ? d : 'default',
  );
  const rounds = opts.rounds ?? 24;
  const days: SimDay[] = [];
  let seq = 0;

  async function runDay(day: number): Promise<SimDay> {
    const start = clock.now() - (clock.now() % DAY);
    const stats: Record<string, ProviderDay> = {};
    for (const p of opts.providers) stats[p.provider] = { wanted: p.demand(day), accepted: 0, deferredByUs: 0, multiplier: 1, verdict: null, streak: 0 };
    for (let r = 0; r < rounds; r++) {
      clock.set(start + Math.floor(((r + 0.5) * DAY) / rounds));
      // Providers take turns, one send each, as a mixed queue would offer them.
      let active = opts.providers.filter((p) => stats[p.provider]!.accepted < Math.floor((stats[p.provider]!.wanted * (r + 1)) / rounds));
      while (active.length > 0) {
        const next: ProviderScript[] = [];
        for (const p of active) {
          const s = stats[p.provider]!;
          const res = await warming.reserve(ip, { provider: p.provider, pool: p.pool, jobId: `sim-${++seq}` });
          if (!res.ok) {
            s.deferredByUs++;
            continue;
          }
          const a = p.answer(day, s.accepted++);
          const pressure = a.kind === 'deferred' ? rules.classify(a) : null;
          await warming.record(ip, p.provider, a.kind, pressure);
          if (s.accepted < Math.floor((s.wanted * (r + 1)) / rounds)) next.push(p);
        }
        active = next;
      }
    }
    const v = await warming.view(ip);
    for (const pv of v.providers) Object.assign(stats[pv.provider] ?? {}, { multiplier: pv.multiplier, verdict: pv.verdict, streak: pv.streak });
    const row = { day, scheduleDay: v.day, cap: v.cap, sent: v.sentToday, providers: stats };
    clock.set(start + DAY);
    return row;
  }

  return {
    clock,
    coord,
    warming,
    graduations,
    days,
    async run(n) {
      for (let i = 0; i < n; i++) days.push(await runDay(days.length + 1));
      return days;
    },
  };
}
