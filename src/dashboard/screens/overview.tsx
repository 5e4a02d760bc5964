/** Sends, deliveries, bounces, complaints, opens and clicks per day; rates against the danger lines. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { LineChart } from '../chart.js';
import { ErrorBox, Field, Screen, useLoad } from '../ui.js';

interface Day {
  day: string;
  sends: number;
  delivered: number;
  bounced: number;
  complained: number;
  opens: number;
  clicks: number;
}
interface Stats {
  days: Day[];
  totals: { sends: number; bounced: number; complained: number };
  rates: { bounce: number; complaint: number };
  thresholds: { complaint: number; bounce: number };
}

const pct = (v: number) => `${(v * 100).toFixed(v < 0.01 ? 2 : 1)} %`;

export function Overview() {
  const [days, setDays] = useState(30);
  const { data, error } = useLoad(() => api<{ data: Stats }>('GET', `/admin/dashboard/stats?days=${days}`), [days]);
  const s = data?.data;
  const labels = s?.days.map((d) => d.day) ?? [];
  const col = (k: keyof Omit<Day, 'day'>) => s?.days.map((d) => d[k]) ?? [];
  const rate = (k: 'bounced' | 'complained') => s?.days.map((d) => (d.sends ? d[k] / d.sends : 0)) ?? [];
  return (
    <Screen
      title="Overview"
      actions={
        <Field label="Period">
          <select value={days} onChange={(e) => setDays(Number(e.currentTarget.value))}>
            <option value={7}>Last 7 days</option>
            <option value={30}>Last 30 days</option>
            <option value={90}>Last 90 days</option>
          </select>
        </Field>
      }
    >
      <ErrorBox error={error} />
      {s ? (
        <>
          <div class="kpis">
            <div class="kpi">
              <span>Sent</span>
              <strong>{s.totals.sends.toLocaleString('en')}</strong>
            </div>
            <div class={s.rates.bounce >= s.thresholds.bounce ? 'kpi bad' : 'kpi'}>
              <span>Bounce rate</span>
              <strong>{pct(s.rates.bounce)}</strong>
              <small>danger at {pct(s.thresholds.bounce)}</small>
            </div>
            <div class={s.rates.complaint >= s.thresholds.complaint ? 'kpi bad' : 'kpi'}>
              <span>Complaint rate</span>
              <strong>{pct(s.rates.complaint)}</strong>
              <small>danger at {pct(s.thresholds.complaint)}</small>
            </div>
          </div>
          <LineChart
            title="Messages per day"
            days={labels}
            series={[
              { label: 'Sent', values: col('sends'), color: '#3358c4' },
              { label: 'Delivered', values: col('delivered'), color: '#1f7a3a' },
              { label: 'Opened', values: col('opens'), color: '#8a5a00' },
              { label: 'Clicked', values: col('clicks'), color: '#7a2f9e' },
            ]}
          />
          <LineChart
            title="Bounces and complaints per day"
            days={labels}
            series={[
              { label: 'Bounced', values: col('bounced'), color: '#b3261e' },
              { label: 'Complained', values: col('complained'), color: '#6b4e00' },
            ]}
          />
          <LineChart
            title="Bounce and complaint rates"
            days={labels}
            format={pct}
            series={[
              { label: 'Bounce rate', values: rate('bounced'), color: '#b3261e', total: `${pct(s.rates.bounce)} over the period` },
              { label: 'Complaint rate', values: rate('complained'), color: '#6b4e00', total: `${pct(s.rates.complaint)} over the period` },
            ]}
            lines={[
              { label: `bounce danger ${pct(s.thresholds.bounce)}`, value: s.thresholds.bounce, color: '#b3261e' },
              { label: `complaint danger ${pct(s.thresholds.complaint)}`, value: s.thresholds.complaint, color: '#6b4e00' },
            ]}
          />
        </>
      ) : null}
    </Screen>
  );
}
