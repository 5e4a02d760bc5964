/** Line charts in plain SVG (no chart library): series over days, optional danger lines. */
export interface Series {
  label: string;
  values: number[];
  color: string;
  /** Shown in the legend instead of the sum (rates do not add up). */
  total?: string;
}

export function LineChart({
  title,
  days,
  series,
  lines = [],
  format = (v: number) => v.toLocaleString('en'),
}: {
  title: string;
  days: string[];
  series: Series[];
  lines?: { label: string; value: number; color: string }[];
  format?: (v: number) => string;
}) {
  const W = 640;
  const H = 220;
  const pad = { l: 48, r: 12, t: 12, b: 28 };
  // Counts start from a scale of 1 (an empty period is a flat line at 0, not a 0–0 axis).
  const max = Math.max(lines.length ? 1e-9 : 1, ...series.flatMap((s) => s.values), ...lines.map((l) => l.value * 1.25));
  const x = (i: number) => pad.l + (days.length <= 1 ? 0 : (i * (W - pad.l - pad.r)) / (days.length - 1));
  const y = (v: number) => H - pad.b - (v / max) * (H - pad.t - pad.b);
  const ticks = [0, max / 2, max];
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`${title}: ${series.map((s) => `${s.label} ${s.total ?? format(s.values.reduce((a, b) => a + b, 0)) + ' in all'}`).join(', ')}`}>
        {ticks.map((t) => (
          <g key={t}>
            <line x1={pad.l} x2={W - pad.r} y1={y(t)} y2={y(t)} class="grid" />
            <text x={pad.l - 6} y={y(t) + 4} text-anchor="end" class="tick">
              {format(t)}
            </text>
          </g>
        ))}
        {days.length ? (
          <>
            <text x={pad.l} y={H - 8} class="tick">
              {days[0]}
            </text>
            <text x={W - pad.r} y={H - 8} text-anchor="end" class="tick">
              {days[days.length - 1]}
            </text>
          </>
        ) : null}
        {lines.map((l) => (
          <g key={l.label}>
            <line x1={pad.l} x2={W - pad.r} y1={y(l.value)} y2={y(l.value)} stroke={l.color} stroke-dasharray="6 4" class="danger" />
            <text x={W - pad.r} y={y(l.value) - 4} text-anchor="end" fill={l.color} class="tick">
              {l.label}
            </text>
          </g>
        ))}
        {series.map((s) => (
          <polyline key={s.label} fill="none" stroke={s.color} stroke-width="2" points={s.values.map((v, i) => `${x(i)},${y(v)}`).join(' ')} />
        ))}
      </svg>
      <ul class="legend">
        {series.map((s) => (
          <li key={s.label}>
            <span class="swatch" style={{ background: s.color }} aria-hidden="true" />
            {s.label}: {s.total ?? format(s.values.reduce((a, b) => a + b, 0))}
          </li>
        ))}
      </ul>
    </figure>
  );
}
