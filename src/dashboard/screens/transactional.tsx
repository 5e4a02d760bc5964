/** The transactional log: search by recipient or Message-ID; each send's event timeline. */
import { useState } from 'preact/hooks';
import { api, qs, type Page } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useCursorPage, useLoad, when } from '../ui.js';

interface Send {
  id: string;
  to: string;
  from: string;
  subject: string;
  messageId: string | null;
  provider: string;
  status: string;
  error: string | null;
  createdAt: string;
}

export function Transactional({ id }: { id?: string }) {
  return id ? <SendDetail id={id} /> : <SendList />;
}

function SendList() {
  const [recipient, setRecipient] = useState('');
  const [messageId, setMessageId] = useState('');
  const [q, setQ] = useState({ recipient: '', messageId: '' });
  const p = useCursorPage((cursor) => api<Page<Send>>('GET', `/admin/dashboard/sends${qs({ ...q, cursor })}`), [q.recipient, q.messageId]);
  return (
    <Screen title="Transactional log">
      <form
        class="row"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setQ({ recipient: recipient.trim(), messageId: messageId.trim() });
        }}
      >
        <Field label="Recipient">
          <input type="search" value={recipient} onInput={(e) => setRecipient(e.currentTarget.value)} />
        </Field>
        <Field label="Message ID">
          <input type="search" value={messageId} onInput={(e) => setMessageId(e.currentTarget.value)} />
        </Field>
        <button type="submit">Search</button>
      </form>
      <ErrorBox error={p.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Transactional sends</caption>
          <thead>
            <tr>
              <th scope="col">To</th>
              <th scope="col">Subject</th>
              <th scope="col">State</th>
              <th scope="col">Sent</th>
            </tr>
          </thead>
          <tbody>
            {p.data?.data.map((s) => (
              <tr key={s.id}>
                <td>
                  <a href={`/transactional/${s.id}`}>{s.to}</a>
                </td>
                <td>{s.subject}</td>
                <td>{s.status}</td>
                <td>{when(s.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {p.data && !p.data.data.length ? <Notice>No sends match.</Notice> : null}
      <Pager p={p} label="Sends" />
    </Screen>
  );
}

function SendDetail({ id }: { id: string }) {
  const r = useLoad(() => api<{ data: Send & { timeline: { type: string; source: string; detail: unknown; at: string }[] } }>('GET', `/admin/dashboard/sends/${id}`), [id]);
  const s = r.data?.data;
  return (
    <Screen title={s ? s.subject : 'Send'} actions={<a href="/transactional">All sends</a>}>
      <ErrorBox error={r.error} />
      {s ? (
        <>
          <dl class="facts">
            <dt>To</dt>
            <dd>{s.to}</dd>
            <dt>From</dt>
            <dd>{s.from}</dd>
            <dt>Message ID</dt>
            <dd>{s.messageId ?? '—'}</dd>
            <dt>Provider</dt>
            <dd>{s.provider}</dd>
            <dt>State</dt>
            <dd>{s.status}{s.error ? ` (${s.error})` : ''}</dd>
          </dl>
          <h2>Events</h2>
          <ol class="timeline">
            {s.timeline.map((e, i) => (
              <li key={i}>
                <strong>{e.type}</strong> · {when(e.at)} · {e.source}
              </li>
            ))}
          </ol>
        </>
      ) : null}
    </Screen>
  );
}
