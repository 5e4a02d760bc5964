/**
 * Deliverability, read from the MTA through the backend (/admin/mta/*): suppressions, the
 * queue, sending IPs (warming, caps, provider multipliers, blocklists, audit), DKIM keys and
 * the DNS records of a domain with their live check. What the MTA does not offer yet is said.
 */
import { useState } from 'preact/hooks';
import { api, qs, type Page } from '../api.js';
import type { QueueDomain } from '../../shared/contracts/mta.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useCursorPage, useLoad, when } from '../ui.js';

const TABS: [string, string][] = [
  ['suppressions', 'Suppressions'],
  ['queue', 'Queue'],
  ['ips', 'Sending IPs'],
  ['dkim', 'DKIM keys'],
  ['dns', 'DNS records'],
];

export function Deliverability({ tab = 'suppressions' }: { tab?: string }) {
  return (
    <Screen title="Deliverability">
      <nav aria-label="Deliverability views" class="tabs">
        {TABS.map(([k, label]) => (
          <a key={k} href={`/deliverability/${k}`} aria-current={tab === k ? 'page' : undefined}>
            {label}
          </a>
        ))}
      </nav>
      {tab === 'queue' ? <Queue /> : tab === 'ips' ? <Ips /> : tab === 'dkim' ? <Dkim /> : tab === 'dns' ? <Dns /> : <Suppressions />}
    </Screen>
  );
}

interface Suppression {
  address: string;
  reason: string;
  source?: string;
  createdAt: string;
}

function Suppressions() {
  const canWrite = useCanWrite('deliverability');
  const [reason, setReason] = useState('');
  const stats = useLoad(() => api<{ data: Record<string, number> }>('GET', '/admin/mta/suppression/stats'), []);
  const p = useCursorPage(
    async (cursor) => {
      const r = await api<{ data: Suppression[]; nextCursor: string | null }>('GET', `/admin/mta/suppression/export${qs({ reason, cursor, limit: 25 })}`);
      return { data: r.data, pagination: { limit: 25, cursor: r.nextCursor, isDone: !r.nextCursor } };
    },
    [reason],
  );
  const [check, setCheck] = useState('');
  const [checked, setChecked] = useState<string | null>(null);
  const look = useAction();
  const [add, setAdd] = useState('');
  const change = useAction();
  const [csv, setCsv] = useState<File | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const reload = () => {
    p.reload();
    stats.reload();
  };
  return (
    <section aria-labelledby="sup-title">
      <h2 id="sup-title">Suppressions</h2>
      <ErrorBox error={stats.error ?? p.error} />
      {stats.data ? (
        <p>
          {Object.entries(stats.data.data)
            .map(([k, v]) => `${k.replace(/_/g, ' ')}: ${typeof v === 'number' ? v.toLocaleString('en') : JSON.stringify(v)}`)
            .join(' · ')}
        </p>
      ) : null}
      <form
        class="row"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          void look.run(async () => {
            const r = await api<{ data: { address: string; suppressed: boolean; reason: string | null; createdAt: string | null } }>(
              'GET',
              `/admin/mta/suppression/check/${encodeURIComponent(check.trim())}`,
            );
            setChecked(r.data.suppressed ? `${r.data.address} is suppressed (${r.data.reason}, since ${when(r.data.createdAt)}).` : `${r.data.address} is not suppressed.`);
          });
        }}
      >
        <Field label="Look up an address">
          <input type="search" required value={check} onInput={(e) => setCheck(e.currentTarget.value)} />
        </Field>
        <button type="submit">Look up</button>
      </form>
      <ErrorBox error={look.error} />
      {checked ? <Notice>{checked}</Notice> : null}
      <Field label="Show reason">
        <select value={reason} onChange={(e) => setReason(e.currentTarget.value)}>
          <option value="">every reason</option>
          <option value="hard_bounce">hard bounce</option>
          <option value="complaint">complaint</option>
          <option value="manual">manual</option>
        </select>
      </Field>
      <ErrorBox error={change.error} />
      {done ? <Notice>{done}</Notice> : null}
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Suppressed addresses</caption>
          <thead>
            <tr>
              <th scope="col">Address</th>
              <th scope="col">Reason</th>
              <th scope="col">Since</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {p.data?.data.map((s) => (
              <tr key={s.address}>
                <td>{s.address}</td>
                <td>{s.reason}</td>
                <td>{when(s.createdAt)}</td>
                <td>
                  {canWrite ? (
                    <button
                      type="button"
                      aria-label={`Remove ${s.address}`}
                      onClick={() =>
                        change.run(async () => {
                          await api('DELETE', `/admin/mta/suppression/${encodeURIComponent(s.address)}`);
                          setDone(`${s.address} removed from the suppression list.`);
                          reload();
                        })
                      }
                    >
                      Remove
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {p.data && !p.data.data.length ? <Notice>No suppressed addresses.</Notice> : null}
      <Pager p={p} label="Suppressions" />
      {canWrite ? (
        <div class="split">
          <form
            class="card"
            aria-label="Add a suppression"
            onSubmit={(e) => {
              e.preventDefault();
              void change.run(async () => {
                await api('POST', '/admin/mta/suppression', { addresses: [add.trim()], reason: 'manual' });
                setDone(`${add.trim()} suppressed.`);
                setAdd('');
                reload();
              });
            }}
          >
            <Field label="Suppress an address">
              <input type="email" required value={add} onInput={(e) => setAdd(e.currentTarget.value)} />
            </Field>
            <button type="submit">Suppress</button>
          </form>
          <form
            class="card"
            aria-label="Import suppressions"
            onSubmit={(e) => {
              e.preventDefault();
              void change.run(async () => {
                if (!csv) throw new Error('Choose a CSV file first.');
                // One address per line (the first column); a header line without @ is skipped.
                const addresses = (await csv.text())
                  .split(/\r?\n/)
                  .map((l) => l.split(',')[0]!.trim().replace(/^"|"$/g, ''))
                  .filter((a) => a.includes('@'));
                if (!addresses.length) throw new Error('The file has no addresses in its first column.');
                const r = await api<{ data: Record<string, number> }>('POST', '/admin/mta/suppression/bulk', { addresses, reason: 'manual' });
                setDone(`Imported ${addresses.length} addresses: ${JSON.stringify(r.data)}.`);
                reload();
              });
            }}
          >
            <Field label="Import suppressions (CSV, first column)">
              <input type="file" accept=".csv,text/csv,text/plain" onChange={(e) => setCsv(e.currentTarget.files?.[0] ?? null)} />
            </Field>
            <button type="submit">Import</button>
          </form>
          <section class="card" aria-label="Export suppressions">
            <p>Export every suppressed address as CSV.</p>
            <button type="button" onClick={() => change.run(exportSuppressions)}>
              Export CSV
            </button>
          </section>
        </div>
      ) : null}
    </section>
  );
}

/** Walks the MTA's export cursor page by page (10,000 a page) into one CSV file. */
async function exportSuppressions(): Promise<void> {
  const lines = ['address,reason,created_at'];
  let cursor: string | null = null;
  do {
    const r: { data: Suppression[]; nextCursor: string | null } = await api('GET', `/admin/mta/suppression/export${qs({ cursor, limit: 10000 })}`);
    for (const s of r.data) lines.push(`${s.address},${s.reason},${s.createdAt}`);
    cursor = r.nextCursor;
  } while (cursor);
  const url = URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = 'suppressions.csv';
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** The queue by destination domain (MTA /queue/domains), 25 domains a page. */
function QueueDomains() {
  const p = useCursorPage((cursor) => api<Page<QueueDomain>>('GET', `/admin/mta/queue/domains${qs({ cursor, limit: 25 })}`), []);
  const rows = p.data?.data ?? [];
  return (
    <>
      <h3 id="queue-domains-title">By destination domain</h3>
      <ErrorBox error={p.error} />
      <div class="table-wrap">
        <table aria-labelledby="queue-domains-title">
          <thead>
            <tr>
              <th scope="col">Domain</th>
              <th scope="col">Due now</th>
              <th scope="col">Delayed</th>
              <th scope="col">Sending</th>
              <th scope="col">Oldest</th>
              <th scope="col">Last remote reply</th>
              <th scope="col">Paused</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((d) => (
              <tr key={d.domain}>
                <td>{d.domain}</td>
                <td>{d.pending.toLocaleString('en')}</td>
                <td>{d.delayed.toLocaleString('en')}</td>
                <td>{d.active.toLocaleString('en')}</td>
                <td>{when(d.oldestAt)}</td>
                <td>{d.lastReply ? `${d.lastReply.text ?? d.lastReply.code} (${when(d.lastReply.at)})` : '—'}</td>
                <td>{d.paused ? `until ${when(d.paused.until)}: ${d.paused.reason ?? 'reason not recorded'}` : 'no'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {p.data && !rows.length ? <Notice>No destination domain has messages waiting.</Notice> : null}
      <Pager p={p} label="Destination domains" />
    </>
  );
}

interface Job {
  jobId: string;
  state: string;
  to: string | null;
  domain: string | null;
  attempts: number;
  runAt: string;
}

function Queue() {
  const stats = useLoad(() => api<{ data: Record<string, number> }>('GET', '/admin/mta/queue/stats'), []);
  const [domain, setDomain] = useState('');
  const [d, setD] = useState('');
  const [offset, setOffset] = useState(0);
  const jobs = useLoad(() => api<{ data: Job[] }>('GET', `/admin/mta/queue/pending${qs({ domain: d, offset, limit: 26 })}`), [d, offset]);
  const rows = jobs.data?.data.slice(0, 25) ?? [];
  return (
    <section aria-labelledby="queue-title">
      <h2 id="queue-title">Queue</h2>
      <ErrorBox error={stats.error ?? jobs.error} />
      {stats.data ? (
        <div class="kpis">
          {Object.entries(stats.data.data).map(([k, v]) => (
            <div class="kpi" key={k}>
              <span>{k}</span>
              <strong>{v.toLocaleString('en')}</strong>
            </div>
          ))}
        </div>
      ) : null}
      <QueueDomains />
      <h3>Pending messages</h3>
      <form
        class="row"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setOffset(0);
          setD(domain.trim());
        }}
      >
        <Field label="Destination domain">
          <input type="search" value={domain} placeholder="e.g. gmail.com" onInput={(e) => setDomain(e.currentTarget.value)} />
        </Field>
        <button type="submit">Show</button>
      </form>
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Pending messages</caption>
          <thead>
            <tr>
              <th scope="col">Recipient</th>
              <th scope="col">Domain</th>
              <th scope="col">State</th>
              <th scope="col">Attempts</th>
              <th scope="col">Next try</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((j) => (
              <tr key={j.jobId}>
                <td>{j.to ?? '—'}</td>
                <td>{j.domain ?? '—'}</td>
                <td>{j.state}</td>
                <td>{j.attempts}</td>
                <td>{when(j.runAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {jobs.data && !rows.length ? <Notice>Nothing is waiting{d ? ` for ${d}` : ''}.</Notice> : null}
      <Pager
        p={{
          pageNumber: offset / 25 + 1,
          prev: offset > 0 ? () => setOffset(offset - 25) : null,
          next: (jobs.data?.data.length ?? 0) > 25 ? () => setOffset(offset + 25) : null,
        }}
        label="Queue"
      />
    </section>
  );
}

interface Ip {
  ip: string;
  ehloName: string;
  pools: string[];
  eligible: boolean;
  block: { reason: string; zone: string | null; since: string } | null;
  warming: {
    warmed: boolean;
    day: number | null;
    cap: number | null;
    sentToday: number;
    verdict: string | null;
    providers: { provider: string; multiplier: number; cap: number | null; sentToday: number; verdict: string | null }[];
  };
  blocklist: { monitored: boolean; zones: { zone: string; severity: string; state: string }[] };
}

function Ips() {
  const ips = useLoad(() => api<{ data: Ip[] }>('GET', '/admin/mta/ip-reputation'), []);
  const audit = useLoad(() => api<{ data: any }>('GET', '/admin/mta/ip-audit'), []);
  return (
    <section aria-labelledby="ips-title">
      <h2 id="ips-title">Sending IPs</h2>
      <ErrorBox error={ips.error} />
      {ips.data && !ips.data.data.length ? <Notice>The MTA has no sending IPs configured.</Notice> : null}
      {ips.data?.data.map((ip) => (
        <article class="card" key={ip.ip} aria-labelledby={`ip-${ip.ip}`}>
          <h3 id={`ip-${ip.ip}`}>
            {ip.ip} <small>{ip.ehloName}</small>
          </h3>
          <dl class="facts">
            <dt>Pools</dt>
            <dd>{ip.pools.join(', ') || '—'}</dd>
            <dt>Eligible</dt>
            <dd>{ip.eligible ? 'yes' : `no${ip.block ? ` (blocked: ${ip.block.reason}${ip.block.zone ? `, ${ip.block.zone}` : ''} since ${when(ip.block.since)})` : ''}`}</dd>
            <dt>Warming</dt>
            <dd>
              {ip.warming.warmed
                ? 'warmed'
                : `day ${ip.warming.day ?? '—'}, cap ${ip.warming.cap ?? 'unlimited'}, sent today ${ip.warming.sentToday}${ip.warming.verdict ? `, verdict ${ip.warming.verdict}` : ''}`}
            </dd>
            <dt>Providers</dt>
            <dd>
              {ip.warming.providers.length
                ? ip.warming.providers.map((p) => `${p.provider} ×${p.multiplier} (cap ${p.cap ?? 'none'}, sent ${p.sentToday}${p.verdict ? `, ${p.verdict}` : ''})`).join('; ')
                : '—'}
            </dd>
            <dt>Blocklists</dt>
            <dd>
              {ip.blocklist.monitored
                ? ip.blocklist.zones.map((z) => `${z.zone}: ${z.state}`).join(', ') || 'no zones'
                : 'not monitored (DNSBL_MONITOR is off)'}
            </dd>
          </dl>
        </article>
      ))}
      <h3>Audit</h3>
      <ErrorBox error={audit.error} />
      {audit.data ? <AuditVerdicts run={audit.data.data} /> : null}
    </section>
  );
}

function AuditVerdicts({ run }: { run: any }) {
  const items: any[] = Array.isArray(run) ? run : (run?.results ?? run?.ips ?? []);
  if (!run || !items.length) return <Notice>No audit has run yet.</Notice>;
  return (
    <ul>
      {items.map((r, i) => (
        <li key={i}>
          <strong>{r.ip ?? r.address ?? `#${i + 1}`}</strong>: {r.verdict ?? r.state ?? 'see details'}
          {r.problems?.length ? ` (${r.problems.map((p: any) => (typeof p === 'string' ? p : (p.message ?? p.check))).join('; ')})` : ''}
        </li>
      ))}
    </ul>
  );
}

interface DkimKey {
  domain: string;
  selector: string;
  algorithm?: string;
  dnsName: string;
  dnsValue: string;
  published?: string;
  createdAt: string;
  pending: { selector: string; dnsName: string } | null;
}

function Dkim() {
  const keys = useLoad(() => api<{ data: DkimKey[] }>('GET', '/admin/mta/dkim'), []);
  return (
    <section aria-labelledby="dkim-title">
      <h2 id="dkim-title">DKIM keys</h2>
      <ErrorBox error={keys.error} />
      {keys.data && !keys.data.data.length ? <Notice>No DKIM keys yet. The MTA makes one when a domain is added.</Notice> : null}
      <div class="table-wrap">
        <table>
          <caption class="sr-only">DKIM keys</caption>
          <thead>
            <tr>
              <th scope="col">Domain</th>
              <th scope="col">Selector</th>
              <th scope="col">DNS</th>
              <th scope="col">Rotation</th>
              <th scope="col">Since</th>
            </tr>
          </thead>
          <tbody>
            {keys.data?.data.map((k) => (
              <tr key={k.domain + k.selector}>
                <td>{k.domain}</td>
                <td>
                  {k.selector}
                  {k.algorithm ? ` (${k.algorithm})` : ''}
                </td>
                <td>{k.published ?? '—'}</td>
                <td>{k.pending ? `next key ${k.pending.selector} waiting at ${k.pending.dnsName}` : 'none pending'}</td>
                <td>{when(k.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

interface DnsRecord {
  kind: string;
  name: string;
  type: string;
  value: string;
  purpose: string;
  state?: 'ok' | 'missing' | 'mismatch';
  found?: string[];
  problem?: string;
}

function Dns() {
  const [domain, setDomain] = useState('');
  const [records, setRecords] = useState<DnsRecord[] | null>(null);
  const a = useAction();
  const load = (check: boolean) =>
    a.run(async () => {
      const d = encodeURIComponent(domain.trim());
      setRecords((await api<{ data: DnsRecord[] }>('GET', `/admin/mta/domains/${d}/${check ? 'check' : 'records'}`)).data);
    });
  return (
    <section aria-labelledby="dns-title">
      <h2 id="dns-title">DNS records</h2>
      <form
        class="row"
        onSubmit={(e) => {
          e.preventDefault();
          void load(false);
        }}
      >
        <Field label="Sending domain">
          <input required value={domain} placeholder="acme.example" onInput={(e) => setDomain(e.currentTarget.value)} />
        </Field>
        <button type="submit" disabled={a.busy}>
          Show records
        </button>
        <button type="button" disabled={a.busy || !domain.trim()} onClick={() => load(true)}>
          Check DNS now
        </button>
      </form>
      <ErrorBox error={a.error} />
      {records ? (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">Records to publish</caption>
            <thead>
              <tr>
                <th scope="col">Purpose</th>
                <th scope="col">Name</th>
                <th scope="col">Type</th>
                <th scope="col">Value</th>
                <th scope="col">In DNS</th>
              </tr>
            </thead>
            <tbody>
              {records.map((r) => (
                <tr key={r.kind + r.name} class={r.state && r.state !== 'ok' ? 'bad' : undefined}>
                  <td>{r.purpose}</td>
                  <td>
                    <code>{r.name}</code>
                  </td>
                  <td>{r.type}</td>
                  <td>
                    <code class="wrap">{r.value}</code>
                  </td>
                  <td>{r.state ? `${r.state}${r.problem ? `: ${r.problem}` : ''}` : 'not checked'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
