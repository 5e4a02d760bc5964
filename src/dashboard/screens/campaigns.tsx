/**
 * Campaigns: list, compose, test send, send now or schedule for later, live progress, the per-recipient record
 * (filter, export, retry failed) and per-link clicks where the server offers them.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, download, qs, type Page } from '../api.js';
import { navigate } from '../router.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useCursorPage, useListPage, useLoad, when } from '../ui.js';

interface Campaign {
  id: string;
  name: string | null;
  subject: string;
  html: string;
  from: string;
  topicId: string;
  status: string;
  recipients: number | null;
  progress: { handedOver: number; inFlight: number; failed: number; byStatus: Record<string, number> };
  createdAt: string;
  sendStartedAt: string | null;
  completedAt: string | null;
  scheduledAt: string | null;
  archiveUrl: string | null;
}

export function Campaigns({ id }: { id?: string }) {
  if (id === 'new') return <Compose />;
  return id ? <CampaignDetail id={id} /> : <CampaignList />;
}

function CampaignList() {
  const l = useListPage(() => api<{ data: Campaign[] }>('GET', '/admin/campaigns'), []);
  const canWrite = useCanWrite('campaigns');
  return (
    <Screen title="Campaigns" actions={canWrite ? <a class="button primary" href="/campaigns/new">New campaign</a> : null}>
      <ErrorBox error={l.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Campaigns</caption>
          <thead>
            <tr>
              <th scope="col">Campaign</th>
              <th scope="col">Status</th>
              <th scope="col">Recipients</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {l.rows.map((c) => (
              <tr key={c.id}>
                <td>
                  <a href={`/campaigns/${c.id}`}>{c.name || c.subject}</a>
                </td>
                <td>{c.status}</td>
                <td>{c.recipients ?? '—'}</td>
                <td>{when(c.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {l.data && !l.rows.length ? <Notice>No campaigns yet.</Notice> : null}
      <Pager p={l.pager} label="Campaigns" />
    </Screen>
  );
}

function Compose() {
  const topics = useLoad(() => api<{ data: { id: string; name: string }[] }>('GET', '/admin/topics'), []);
  const templates = useLoad(() => api<{ data: { id: string; name: string; subject: string; html: string }[] }>('GET', '/admin/templates'), []);
  const [f, setF] = useState({ name: '', subject: '', from: '', topicId: '', html: '' });
  const a = useAction();
  const set = (k: keyof typeof f) => (e: Event) => setF({ ...f, [k]: (e.currentTarget as HTMLInputElement).value });
  return (
    <Screen title="New campaign" actions={<a href="/campaigns">All campaigns</a>}>
      <ErrorBox error={topics.error ?? templates.error} />
      <form
        class="card"
        aria-label="Compose campaign"
        onSubmit={(e) => {
          e.preventDefault();
          void a.run(async () => {
            const r = await api<{ data: Campaign }>('POST', '/admin/campaigns', { ...f, name: f.name || undefined });
            navigate(`/campaigns/${r.data.id}`);
          });
        }}
      >
        <Field label="Name">
          <input name="name" value={f.name} onInput={set('name')} />
        </Field>
        <Field label="Topic (who receives it)">
          <select name="topicId" required value={f.topicId} onChange={set('topicId')}>
            <option value="">Choose a topic…</option>
            {topics.data?.data.map((t) => (
              <option key={t.id} value={t.id}>
                {t.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label="From">
          <input name="from" required placeholder="Acme <news@acme.example>" value={f.from} onInput={set('from')} />
        </Field>
        <Field label="Start from a template">
          <select
            onChange={(e) => {
              const t = templates.data?.data.find((x) => x.id === e.currentTarget.value);
              if (t) setF({ ...f, subject: t.subject, html: t.html });
            }}
          >
            <option value="">None</option>
            {templates.data?.data.map((t) => (
              <option key={t.id} value={t.id}>
                {t.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Subject">
          <input name="subject" required value={f.subject} onInput={set('subject')} />
        </Field>
        <Field label="HTML">
          <textarea name="html" rows={12} required value={f.html} onInput={set('html')} />
        </Field>
        <ErrorBox error={a.error} />
        <button type="submit" class="primary" disabled={a.busy}>
          Save draft
        </button>
      </form>
    </Screen>
  );
}

const RECIPIENT_STATES = ['', 'queued', 'sent', 'delivered', 'bounced', 'suppressed', 'failed'];

interface Recipient {
  contactId: string;
  email: string;
  status: string;
  reason: string | null;
  smtpResponse: string | null;
  updatedAt: string;
}

function CampaignDetail({ id }: { id: string }) {
  const c = useLoad(() => api<{ data: Campaign }>('GET', `/admin/campaigns/${id}`), [id]);
  const canWrite = useCanWrite('campaigns');
  const send = useAction();
  const d = c.data?.data;
  // Live progress: re-read while the campaign is sending (and now and then while it waits for its time).
  useEffect(() => {
    if (!d || (d.status !== 'sending' && d.status !== 'queued' && d.status !== 'scheduled')) return;
    const t = setTimeout(c.reload, d.status === 'scheduled' ? 10_000 : 1000);
    return () => clearTimeout(t);
  }, [d]);
  const started = d ? d.status !== 'draft' && d.status !== 'scheduled' : false;
  const total = d?.recipients ?? 0;
  const done = d ? d.progress.handedOver + d.progress.failed : 0;
  return (
    <Screen title={d ? d.name || d.subject : 'Campaign'} actions={<a href="/campaigns">All campaigns</a>}>
      <ErrorBox error={c.error} />
      {d ? (
        <>
          <dl class="facts">
            <dt>Status</dt>
            <dd>{d.status}</dd>
            <dt>Subject</dt>
            <dd>{d.subject}</dd>
            <dt>From</dt>
            <dd>{d.from}</dd>
            <dt>Scheduled for</dt>
            <dd>{when(d.scheduledAt)}</dd>
            <dt>Started</dt>
            <dd>{when(d.sendStartedAt)}</dd>
            <dt>Finished</dt>
            <dd>{when(d.completedAt)}</dd>
          </dl>
          {(d.status === 'draft' || d.status === 'scheduled') && canWrite ? (
            <div class="row">
              <button
                type="button"
                class="primary"
                disabled={send.busy}
                onClick={() =>
                  send.run(async () => {
                    if (!confirm(`Send “${d.subject}” to every subscriber of its topic now?`)) return;
                    await api('POST', `/admin/campaigns/${id}/send`);
                    c.reload();
                  })
                }
              >
                Send now
              </button>
              <ErrorBox error={send.error} />
            </div>
          ) : null}
          {(d.status === 'draft' || d.status === 'scheduled') && canWrite ? <Schedule campaign={d} onChange={c.reload} /> : null}
          {started ? (
            <label class="field">
              <span>
                Progress: {done.toLocaleString('en')} of {total.toLocaleString('en')} handed over
                {d.progress.failed ? `, ${d.progress.failed} failed` : ''}
              </span>
              <progress max={Math.max(total, 1)} value={done} aria-label="Sending progress" />
            </label>
          ) : null}
          {started ? (
            <p>
              By state:{' '}
              {Object.entries(d.progress.byStatus)
                .map(([k, v]) => `${k} ${v}`)
                .join(', ') || 'nothing yet'}
            </p>
          ) : null}
          {started ? <Engagement id={id} version={done} /> : null}
          {started ? <RecipientRecord id={id} canWrite={canWrite} /> : null}
        </>
      ) : null}
    </Screen>
  );
}

/** Schedule for later: the browser's local time, sent as an instant (the server checks the window). */
function Schedule({ campaign: d, onChange }: { campaign: Campaign; onChange: () => void }) {
  const [at, setAt] = useState('');
  const a = useAction();
  return (
    <form
      class="row"
      onSubmit={(e) => {
        e.preventDefault();
        void a.run(async () => {
          if (!at) throw new Error('Choose a date and time to schedule the campaign for.');
          const ms = new Date(at).getTime();
          if (Number.isNaN(ms)) throw new Error('That date and time could not be read.');
          await api('POST', `/admin/campaigns/${d.id}/schedule`, { sendAt: new Date(ms).toISOString() });
          setAt('');
          onChange();
        });
      }}
    >
      <Field label="Send at (your local time)">
        <input type="datetime-local" value={at} onInput={(e) => setAt((e.target as HTMLInputElement).value)} />
      </Field>
      <button type="submit" disabled={a.busy}>
        {d.status === 'scheduled' ? 'Reschedule' : 'Schedule'}
      </button>
      {d.status === 'scheduled' ? (
        <button
          type="button"
          disabled={a.busy}
          onClick={() =>
            a.run(async () => {
              await api('DELETE', `/admin/campaigns/${d.id}/schedule`);
              onChange();
            })
          }
        >
          Cancel schedule
        </button>
      ) : null}
      {d.status === 'scheduled' ? <Notice>Scheduled for {when(d.scheduledAt)}.</Notice> : null}
      <ErrorBox error={a.error} />
    </form>
  );
}

function RecipientRecord({ id, canWrite }: { id: string; canWrite: boolean }) {
  const [status, setStatus] = useState('');
  const p = useCursorPage((cursor) => api<Page<Recipient>>('GET', `/admin/campaigns/${id}/recipients${qs({ status, cursor, limit: 50 })}`), [id, status]);
  const retry = useAction();
  const exp = useAction();
  const [queued, setQueued] = useState<number | null>(null);
  return (
    <section aria-labelledby="rcpt-title">
      <h2 id="rcpt-title">Recipients</h2>
      <div class="row">
        <Field label="Show">
          <select value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            {RECIPIENT_STATES.map((s) => (
              <option key={s} value={s}>
                {s || 'every state'}
              </option>
            ))}
          </select>
        </Field>
        <button type="button" onClick={() => p.reload()}>
          Refresh
        </button>
        <button type="button" disabled={exp.busy} onClick={() => exp.run(() => download(`/admin/campaigns/${id}/recipients.csv${qs({ status })}`, `${id}-recipients.csv`))}>
          Export CSV
        </button>
        {canWrite ? (
          <button
            type="button"
            disabled={retry.busy}
            onClick={() =>
              retry.run(async () => {
                const r = await api<{ data: { queued: number } }>('POST', `/admin/campaigns/${id}/retry`);
                setQueued(r.data.queued);
                p.reload();
              })
            }
          >
            Retry failed
          </button>
        ) : null}
      </div>
      <ErrorBox error={exp.error ?? retry.error ?? p.error} />
      {queued !== null ? <Notice>{queued.toLocaleString('en')} failed recipients queued again.</Notice> : null}
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Recipients of this campaign</caption>
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">State</th>
              <th scope="col">Reason</th>
              <th scope="col">Updated</th>
            </tr>
          </thead>
          <tbody>
            {p.data?.data.map((r) => (
              <tr key={r.contactId + r.email}>
                <td>{r.email}</td>
                <td>{r.status}</td>
                <td>{r.reason ?? r.smtpResponse ?? '—'}</td>
                <td>{when(r.updatedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager p={p} label="Recipients" />
    </section>
  );
}

interface EngagementData {
  sends: number;
  opened: number;
  clicked: number;
  openRate: number;
  clickRate: number;
  links: { url: string; clicks: number; recipients: number; machine: number }[];
}

const pct = (v: number) => `${(v * 100).toFixed(1)} %`;

/** Open and click rates, and clicks per link (human clicks; machine clicks shown apart). */
/** `version` changes as sending progresses, so the figures follow it. */
function Engagement({ id, version }: { id: string; version: number }) {
  const e = useLoad(() => api<{ data: EngagementData }>('GET', `/admin/dashboard/campaigns/${id}/engagement`), [id, version]);
  const d = e.data?.data;
  return (
    <section aria-labelledby="eng-title">
      <h2 id="eng-title">Opens and clicks</h2>
      <ErrorBox error={e.error} />
      {d ? (
        <>
          <p>
            Opened by {d.opened.toLocaleString('en')} ({pct(d.openRate)}), clicked by {d.clicked.toLocaleString('en')} ({pct(d.clickRate)}) of{' '}
            {d.sends.toLocaleString('en')} sent.
          </p>
          {d.links.length ? (
            <div class="table-wrap">
              <table>
                <caption class="sr-only">Clicks per link</caption>
                <thead>
                  <tr>
                    <th scope="col">Link</th>
                    <th scope="col">Clicks</th>
                    <th scope="col">Recipients</th>
                    <th scope="col">Machine clicks</th>
                  </tr>
                </thead>
                <tbody>
                  {d.links.map((l) => (
                    <tr key={l.url}>
                      <td>
                        <code class="wrap">{l.url}</code>
                      </td>
                      <td>{l.clicks}</td>
                      <td>{l.recipients}</td>
                      <td>{l.machine}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : (
            <Notice>No clicks yet.</Notice>
          )}
        </>
      ) : null}
    </section>
  );
}
