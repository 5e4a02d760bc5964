/** Webhook endpoints, their deliveries (filtered by state), and replay of one delivery. */
import { useState } from 'preact/hooks';
import { api, qs, type Page } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useCursorPage, useListPage, useLoad, when } from '../ui.js';

interface Hook {
  id: string;
  url: string;
  events: string[];
  enabled: boolean;
  createdAt: string;
}
interface Delivery {
  id: string;
  event: string;
  status: string;
  attemptCount: number;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: string;
}

export function Webhooks({ id }: { id?: string }) {
  return id ? <Deliveries id={id} /> : <HookList />;
}

function HookList() {
  const l = useListPage(() => api<{ data: Hook[] }>('GET', '/admin/webhooks'), []);
  const canWrite = useCanWrite('webhooks');
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState('email.delivered, email.bounced');
  const [secret, setSecret] = useState<string | null>(null);
  const add = useAction();
  return (
    <Screen title="Webhooks">
      <ErrorBox error={l.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Webhook endpoints</caption>
          <thead>
            <tr>
              <th scope="col">Endpoint</th>
              <th scope="col">Events</th>
              <th scope="col">Enabled</th>
            </tr>
          </thead>
          <tbody>
            {l.rows.map((h) => (
              <tr key={h.id}>
                <td>
                  <a href={`/webhook-endpoints/${h.id}`}>{h.url}</a>
                </td>
                <td>{h.events.join(', ')}</td>
                <td>{h.enabled ? 'yes' : 'no'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {l.data && !l.rows.length ? <Notice>No webhook endpoints yet.</Notice> : null}
      <Pager p={l.pager} label="Webhooks" />
      {canWrite ? (
        <form
          class="card"
          aria-label="New webhook endpoint"
          onSubmit={(e) => {
            e.preventDefault();
            void add.run(async () => {
              const r = await api<{ data: { secret: string } }>('POST', '/admin/webhooks', { url, events: events.split(/[\s,]+/).filter(Boolean) });
              setSecret(r.data.secret);
              l.reload();
            });
          }}
        >
          <Field label="Endpoint URL">
            <input type="url" required value={url} onInput={(e) => setUrl(e.currentTarget.value)} />
          </Field>
          <Field label="Events" hint="Comma-separated, e.g. email.delivered, email.bounced, contact.created">
            <input required value={events} onInput={(e) => setEvents(e.currentTarget.value)} />
          </Field>
          <ErrorBox error={add.error} />
          {secret ? (
            <Field label="Signing secret (shown once)">
              <input readOnly value={secret} onFocus={(e) => e.currentTarget.select()} />
            </Field>
          ) : null}
          <button type="submit" disabled={add.busy}>
            Add endpoint
          </button>
        </form>
      ) : null}
    </Screen>
  );
}

function Deliveries({ id }: { id: string }) {
  const h = useLoad(() => api<{ data: Hook }>('GET', `/admin/webhooks/${id}`), [id]);
  const [status, setStatus] = useState('');
  const p = useCursorPage((cursor) => api<Page<Delivery>>('GET', `/admin/webhooks/${id}/deliveries${qs({ status, cursor })}`), [id, status]);
  const canWrite = useCanWrite('webhooks');
  const replay = useAction();
  const [done, setDone] = useState<string | null>(null);
  return (
    <Screen title={h.data ? h.data.data.url : 'Webhook'} actions={<a href="/webhook-endpoints">All endpoints</a>}>
      <ErrorBox error={h.error ?? p.error ?? replay.error} />
      {done ? <Notice>{done}</Notice> : null}
      <Field label="Show deliveries">
        <select value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
          <option value="">all</option>
          <option value="pending">pending</option>
          <option value="succeeded">succeeded</option>
          <option value="failed">failed</option>
        </select>
      </Field>
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Deliveries</caption>
          <thead>
            <tr>
              <th scope="col">Event</th>
              <th scope="col">State</th>
              <th scope="col">Attempts</th>
              <th scope="col">Last answer</th>
              <th scope="col">Created</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {p.data?.data.map((d) => (
              <tr key={d.id}>
                <td>{d.event}</td>
                <td>{d.status}</td>
                <td>{d.attemptCount}</td>
                <td>{d.lastStatusCode ?? d.lastError ?? '—'}</td>
                <td>{when(d.createdAt)}</td>
                <td>
                  {canWrite ? (
                    <button
                      type="button"
                      aria-label={`Replay delivery ${d.id}`}
                      disabled={replay.busy}
                      onClick={() =>
                        replay.run(async () => {
                          await api('POST', `/admin/webhook-deliveries/${d.id}/retry`);
                          setDone(`Delivery ${d.id} queued again.`);
                          p.reload();
                        })
                      }
                    >
                      Replay
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager p={p} label="Deliveries" />
    </Screen>
  );
}
