/**
 * Warming benchmark (`npm run bench:warming`): the warming simulation of the tests
 * (test/harness/warming-sim.ts: the real Warming state, a manual clock, real pressure rules)
 * for 30 days × 4 providers, each wanting 10,000 sends a day:
 *
 *   gmail.com    clean throughout (campaign pool, paced)
 *   outlook.com  answers `451 4.7.500 Server busy … (S77714)` to every third send on days 8–9
 *   yahoo.com    answers `421 4.7.0 [TSS04] …` to everything on day 12
 *   icloud.com   bounces one send in eight on days 5–6 (transactional pool)
 *
 * Baseline, measured in the same run: the same script against the day table alone (no
 * acceleration or deceleration, no provider multiplier), which is what warming did before
 * issue 21. Prints the ratio of sends delivered over 30 days and the day each graduated, and
 * draws the daily caps and sends as docs/warming-chart.svg.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_POLICY, type MtaPolicy } from '../src/mta/policy.js';
import { simulation, type Answer, type ProviderScript, type SimDay } from '../test/harness/warming-sim.js';

const DAYS = Number(process.env.BENCH_DAYS ?? 30);
const DEMAND = Number(process.env.BENCH_DEMAND ?? 10_000);
const OUT = join(import.meta.dirname, '..', 'docs', 'warming-chart.svg');

const SENT: Answer = { kind: 'sent' };
const OUTLOOK: Answer = { kind: 'deferred', code: 451, response: '451 4.7.500 Server busy. Please try again later from [127.0.0.3]. (S77714)' };
const YAHOO: Answer = { kind: 'deferred', code: 421, response: '421 4.7.0 [TSS04] Messages from 127.0.0.3 temporarily deferred due to unexpected volume or user complaints' };

const providers: ProviderScript[] = [
  { provider: 'gmail.com', pool: 'campaign', demand: () => DEMAND, answer: () => SENT },
  { provider: 'outlook.com', pool: 'campaign', demand: () => DEMAND, answer: (d, i) => (d >= 8 && d <= 9 && i % 3 === 0 ? OUTLOOK : SENT) },
  { provider: 'yahoo.com', pool: 'campaign', demand: () => DEMAND, answer: (d) => (d === 12 ? YAHOO : SENT) },
  { provider: 'icloud.com', pool: 'transactional', demand: () => DEMAND, answer: (d, i) => (d >= 5 && d <= 6 && i % 8 === 0 ? { kind: 'bounced' } : SENT) },
];

const tableOnly: MtaPolicy = {
  ...DEFAULT_POLICY,
  adaptiveWarming: {
    ...DEFAULT_POLICY.adaptiveWarming,
    accelerateDays: 1,
    decelerateDays: 1,
    provider: { ...DEFAULT_POLICY.adaptiveWarming.provider, decreaseFactor: 1, recoverStep: 0 },
  },
};

async function run(policy: MtaPolicy) {
  const sim = simulation({ providers, policy });
  const t0 = performance.now();
  const days = await sim.run(DAYS);
  const ms = performance.now() - t0;
  const delivered = (d: SimDay) => Object.values(d.providers).reduce((n, p) => n + p.accepted, 0);
  return { days, ms, total: days.reduce((n, d) => n + delivered(d), 0), graduated: sim.graduations[0]?.state ? days.find((d) => d.cap === null)?.day ?? null : null, delivered };
}

const adaptive = await run(DEFAULT_POLICY);
const baseline = await run(tableOnly);

console.log(`bench:warming — ${DAYS} days × ${providers.length} providers, ${DEMAND.toLocaleString('en')} wanted per provider per day`);
console.log(`day  sched  cap      sent   | table cap  sent   | multipliers (gmail outlook yahoo icloud)`);
for (let i = 0; i < DAYS; i++) {
  const a = adaptive.days[i]!;
  const b = baseline.days[i]!;
  const m = providers.map((p) => a.providers[p.provider]!.multiplier.toFixed(2)).join(' ');
  const cap = (c: number | null) => (c === null ? 'unlim.' : String(c));
  console.log(`${String(a.day).padStart(3)}  ${String(a.scheduleDay).padStart(5)}  ${cap(a.cap).padStart(6)} ${String(adaptive.delivered(a)).padStart(7)}   | ${cap(b.cap).padStart(6)} ${String(baseline.delivered(b)).padStart(7)}   | ${m}`);
}
const r = adaptive.total / baseline.total;
console.log(`sends over ${DAYS} days: adaptive ${adaptive.total.toLocaleString('en')}, day table only ${baseline.total.toLocaleString('en')} → ratio ${r.toFixed(2)}`);
console.log(`graduated on calendar day: adaptive ${adaptive.graduated ?? 'not yet'}, day table only ${baseline.graduated ?? 'not yet'}`);
console.log(`simulation time: adaptive ${adaptive.ms.toFixed(0)} ms, baseline ${baseline.ms.toFixed(0)} ms (ratio ${(adaptive.ms / baseline.ms).toFixed(2)})`);

writeFileSync(OUT, chart(adaptive, baseline));
console.log(`chart: ${OUT}`);

/** The SVG by hand: a few polylines on a log axis need no charting library. */
function chart(a: Awaited<ReturnType<typeof run>>, b: Awaited<ReturnType<typeof run>>): string {
  const W = 860, H = 420, L = 70, R = 190, T = 40, B = 50;
  const pw = W - L - R, ph = H - T - B;
  const lo = 10, hi = 100_000;
  const x = (day: number) => L + ((day - 1) / (DAYS - 1)) * pw;
  const y = (v: number) => T + ph - ((Math.log10(Math.max(lo, Math.min(hi, v))) - 1) / (Math.log10(hi) - 1)) * ph;
  const line = (pts: [number, number][], color: string, dash = '', width = 2) =>
    `<polyline fill="none" stroke="${color}" stroke-width="${width}"${dash ? ` stroke-dasharray="${dash}"` : ''} points="${pts.map(([d, v]) => `${x(d).toFixed(1)},${y(v).toFixed(1)}`).join(' ')}"/>`;
  const capOf = (d: SimDay) => d.cap ?? hi;
  const colors: Record<string, string> = { 'gmail.com': '#d93025', 'outlook.com': '#0078d4', 'yahoo.com': '#6001d2', 'icloud.com': '#7f8c8d' };
  const parts: string[] = [];
  parts.push(`<rect width="${W}" height="${H}" fill="#fff"/>`);
  parts.push(`<text x="${L}" y="24" font-size="15" font-family="sans-serif">Warming one new IP: daily cap and sends per provider (bench:warming, ${DAYS} days, log scale)</text>`);
  for (const v of [10, 100, 1_000, 10_000, 100_000]) {
    parts.push(`<line x1="${L}" x2="${L + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>`);
    parts.push(`<text x="${L - 8}" y="${y(v) + 4}" font-size="11" text-anchor="end" font-family="sans-serif">${v === hi ? 'unlimited' : v.toLocaleString('en')}</text>`);
  }
  for (let d = 1; d <= DAYS; d++) {
    if (d !== 1 && d % 5 !== 0) continue;
    parts.push(`<text x="${x(d)}" y="${T + ph + 18}" font-size="11" text-anchor="middle" font-family="sans-serif">${d}</text>`);
  }
  parts.push(`<text x="${L + pw / 2}" y="${H - 12}" font-size="12" text-anchor="middle" font-family="sans-serif">calendar day</text>`);
  parts.push(line(b.days.map((d) => [d.day, capOf(d)]), '#999', '6 4'));
  parts.push(line(a.days.map((d) => [d.day, capOf(d)]), '#111', '', 3));
  // Providers that are not restricted send alike: wider lines underneath keep each visible.
  const widths = [7, 4.5, 2, 2];
  providers.forEach((p, i) => parts.push(line(a.days.map((d) => [d.day, d.providers[p.provider]!.accepted]), colors[p.provider]!, '', widths[i]!)));
  parts.push(line(a.days.map((d) => [d.day, a.delivered(d)]), '#2e7d32', '2 3', 2));
  const legend: [string, string, string][] = [
    ['#111', '', 'cap, adaptive'],
    ['#999', '6 4', 'cap, day table only'],
    ['#2e7d32', '2 3', 'sent: all providers'],
    ...providers.map((p): [string, string, string] => [colors[p.provider]!, '', `sent: ${p.provider}`]),
  ];
  legend.forEach(([c, dash, label], i) => {
    const ly = T + 10 + i * 20;
    parts.push(`<line x1="${L + pw + 15}" x2="${L + pw + 45}" y1="${ly}" y2="${ly}" stroke="${c}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ''}/>`);
    parts.push(`<text x="${L + pw + 52}" y="${ly + 4}" font-size="11" font-family="sans-serif">${label}</text>`);
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">\n${parts.join('\n')}\n</svg>\n`;
}
