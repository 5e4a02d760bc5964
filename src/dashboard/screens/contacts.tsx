/** Contacts: search, cursor paging, a contact's detail and activity, CSV import and export. */
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, download, qs, type Page } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useCursorPage, useLoad, when } from '../ui.js';

interface Contact {
  id: string;
  email: string;
  firstName: string | null;
  lastName: string | null;
  source: string;
  createdAt: string;
}

export function Contacts({ id }: { id?: string }) {
  return id ? <ContactDetail id={decodeURIComponent(id)} /> : <ContactList />;
}

function ContactList() {
  const [term, setTerm] = useState(new URLSearchParams(location.search).get('search') ?? '');
  const [search, setSearch] = useState(term);
  const p = useCursorPage((cursor) => api<Page<Contact>>('GET', `/admin/dashboard/contacts${qs({ search, cursor, limit: 25 })}`), [search]);
  const canWrite = useCanWrite('contacts');
  const exp = useAction();
  return (
    <Screen
      title="Contacts"
      actions={
        <button type="button" disabled={exp.busy} onClick={() => exp.run(() => download('/admin/contacts/export.csv', 'contacts.csv'))}>
          Export CSV
        </button>
      }
    >
      <ErrorBox error={exp.error} />
      <form
        class="row"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setSearch(term.trim());
          history.replaceState(null, '', `/contacts${qs({ search: term.trim() })}`);
        }}
      >
        <Field label="Search contacts">
          <input type="search" name="search" value={term} placeholder="name, email or domain" onInput={(e) => setTerm(e.currentTarget.value)} />
        </Field>
        <button type="submit">Search</button>
      </form>
      <ErrorBox error={p.error} />
      <div class="table-wrap">
        <table aria-busy={p.loading}>
          <caption class="sr-only">Contacts{search ? ` matching ${search}` : ''}</caption>
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Name</th>
              <th scope="col">Source</th>
              <th scope="col">Added</th>
            </tr>
          </thead>
          <tbody>
            {p.data?.data.map((c) => (
              <tr key={c.id}>
                <td>
                  <a href={`/contacts/${encodeURIComponent(c.id)}`}>{c.email}</a>
                </td>
                <td>{[c.firstName, c.lastName].filter(Boolean).join(' ') || '—'}</td>
                <td>{c.source}</td>
                <td>{when(c.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {p.data && p.data.data.length === 0 ? <p>No contacts{search ? ' match this search' : ' yet'}.</p> : null}
      </div>
      <Pager p={p} label="Contacts" />
      {canWrite ? <Import /> : null}
    </Screen>
  );
}

interface ImportJob {
  id: string;
  state: string;
  total: number;
  processed: number;
  imported: number;
  rejected: number;
  errors: { row: number; email?: string; message: string }[];
  /** Why a failed import stopped. */
  error?: string | null;
}

function Import() {
  const [job, setJob] = useState<ImportJob | null>(null);
  const file = useRef<HTMLInputElement>(null);
  const a = useAction();
  useEffect(() => {
    if (!job || job.state === 'done' || job.state === 'failed') return;
    const t = setTimeout(() => {
      api<{ data: ImportJob }>('GET', `/admin/contacts/imports/${job.id}`).then(
        (r) => setJob(r.data),
        (e) => a.setError(e),
      );
    }, 500);
    return () => clearTimeout(t);
  }, [job]);
  const start = (e: Event) => {
    e.preventDefault();
    const f = file.current?.files?.[0];
    if (!f) return a.setError(new Error('Choose a CSV file first.'));
    void a.run(async () => {
      const r = await api<{ data: { id: string } }>('POST', '/admin/contacts/imports', f, { contentType: 'text/csv' });
      setJob({ id: r.data.id, state: 'queued', total: 0, processed: 0, imported: 0, rejected: 0, errors: [] });
    });
  };
  const pct = job && job.total ? Math.round((job.processed / job.total) * 100) : job?.state === 'done' ? 100 : 0;
  return (
    <section class="card" aria-labelledby="import-title">
      <h2 id="import-title">Import contacts from CSV</h2>
      <p>A header row with an <code>email</code> column; <code>first_name</code> and <code>last_name</code> are optional.</p>
      <form class="row" onSubmit={start}>
        <Field label="CSV file">
          <input type="file" accept=".csv,text/csv" ref={file} />
        </Field>
        <button type="submit" disabled={a.busy}>
          Import
        </button>
      </form>
      <ErrorBox error={a.error} />
      {job ? (
        <div>
          <label class="field">
            <span>
              Import {job.state}: {job.processed.toLocaleString('en')} of {job.total ? job.total.toLocaleString('en') : '…'} rows
            </span>
            <progress max={100} value={pct} aria-label="Import progress">
              {pct} %
            </progress>
          </label>
          <p role="status">
            {job.imported.toLocaleString('en')} imported, {job.rejected.toLocaleString('en')} rejected.
          </p>
          {job.state === 'failed' ? <ErrorBox error={new Error(`The import stopped: ${job.error ?? 'unknown error'}`)} /> : null}
          {job.errors.length ? (
            <div class="table-wrap">
              <table>
                <caption>Rejected rows</caption>
                <thead>
                  <tr>
                    <th scope="col">Row</th>
                    <th scope="col">Email</th>
                    <th scope="col">Why</th>
                  </tr>
                </thead>
                <tbody>
                  {job.errors.slice(0, 100).map((e) => (
                    <tr key={e.row}>
                      <td>{e.row}</td>
                      <td>{e.email ?? '—'}</td>
                      <td>{e.message}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : null}
        </div>
      ) : null}
    </section>
  );
}

interface Detail extends Contact {
  topics: { topicId: string; name: string; doiStatus: string; subscribed: boolean; since: string }[];
}
interface Activity {
  id: string;
  type: string;
  source: string;
  sendId: string | null;
  detail: Record<string, unknown>;
  occurredAt: string;
}

function ContactDetail({ id }: { id: string }) {
  const c = useLoad(() => api<{ data: Detail }>('GET', `/admin/dashboard/contacts/${encodeURIComponent(id)}`), [id]);
  const p = useCursorPage((cursor) => api<Page<Activity>>('GET', `/admin/dashboard/contacts/${encodeURIComponent(id)}/activity${qs({ cursor })}`), [id]);
  const d = c.data?.data;
  return (
    <Screen title={d ? d.email : 'Contact'} actions={<a href="/contacts">All contacts</a>}>
      <ErrorBox error={c.error} />
      {d ? (
        <dl class="facts">
          <dt>Name</dt>
          <dd>{[d.firstName, d.lastName].filter(Boolean).join(' ') || '—'}</dd>
          <dt>Source</dt>
          <dd>{d.source}</dd>
          <dt>Added</dt>
          <dd>{when(d.createdAt)}</dd>
          <dt>Topics</dt>
          <dd>
            {d.topics.length
              ? d.topics.map((t) => `${t.name} (${t.subscribed ? (t.doiStatus === 'pending' ? 'awaiting confirmation' : 'subscribed') : 'unsubscribed'})`).join(', ')
              : 'none'}
          </dd>
        </dl>
      ) : null}
      <h2>Activity</h2>
      <ErrorBox error={p.error} />
      {p.data && p.data.data.length === 0 ? <Notice>No activity yet.</Notice> : null}
      <ol class="timeline">
        {p.data?.data.map((a) => (
          <li key={a.id}>
            <strong>{a.type}</strong> · {when(a.occurredAt)} · {a.source}
            {a.sendId ? ` · send ${a.sendId}` : ''}
            {Object.keys(a.detail ?? {}).length ? <code class="detail">{JSON.stringify(a.detail)}</code> : null}
          </li>
        ))}
      </ol>
      <Pager p={p} label="Activity" />
    </Screen>
  );
}

