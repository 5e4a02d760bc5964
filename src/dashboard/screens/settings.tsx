/** Settings: the organization name and base URL this server runs with, and its provider routes. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, Field, Notice, Screen, useAction, useCanWrite, useLoad, when } from '../ui.js';

interface Route {
  stream: string;
  domain: string | null;
  provider: string;
  updatedAt: string;
}

export function Settings() {
  const s = useLoad(() => api<{ data: { organizationName: string; baseUrl: string | null; emailProvider: string | null; mtaConfigured: boolean } }>('GET', '/admin/dashboard/settings'), []);
  const routes = useLoad(() => api<{ data: Route[] }>('GET', '/admin/provider-routes'), []);
  const canWrite = useCanWrite('settings');
  const [f, setF] = useState({ stream: 'transactional', domain: '', provider: 'mta' });
  const save = useAction();
  const d = s.data?.data;
  return (
    <Screen title="Settings">
      <ErrorBox error={s.error} />
      {d ? (
        <dl class="facts">
          <dt>Organization name</dt>
          <dd>{d.organizationName}</dd>
          <dt>Base URL</dt>
          <dd>{d.baseUrl ?? 'not set (links in emails need it)'}</dd>
          <dt>Default provider</dt>
          <dd>{d.emailProvider ?? 'none'}</dd>
          <dt>MTA</dt>
          <dd>{d.mtaConfigured ? 'configured' : 'not configured'}</dd>
        </dl>
      ) : null}
      <Notice>The organization name and base URL come from the server's configuration (ORGANIZATION_NAME, BASE_URL); change them there and restart.</Notice>
      <h2>Provider routes</h2>
      <ErrorBox error={routes.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Provider routes</caption>
          <thead>
            <tr>
              <th scope="col">Stream</th>
              <th scope="col">Domain</th>
              <th scope="col">Provider</th>
              <th scope="col">Changed</th>
            </tr>
          </thead>
          <tbody>
            {routes.data?.data.map((r) => (
              <tr key={r.stream + r.domain}>
                <td>{r.stream}</td>
                <td>{r.domain ?? 'every domain'}</td>
                <td>{r.provider}</td>
                <td>{when(r.updatedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {routes.data && !routes.data.data.length ? <Notice>No routes: every send uses the default provider.</Notice> : null}
      {canWrite ? (
        <form
          class="card row"
          aria-label="Save a provider route"
          onSubmit={(e) => {
            e.preventDefault();
            void save.run(async () => {
              await api('PUT', '/admin/provider-routes', { stream: f.stream, provider: f.provider, domain: f.domain.trim() || null });
              routes.reload();
            });
          }}
        >
          <Field label="Stream">
            <select value={f.stream} onChange={(e) => setF({ ...f, stream: e.currentTarget.value })}>
              <option value="transactional">transactional</option>
              <option value="campaign">campaign</option>
            </select>
          </Field>
          <Field label="Sender domain (empty: every domain)">
            <input value={f.domain} onInput={(e) => setF({ ...f, domain: e.currentTarget.value })} />
          </Field>
          <Field label="Provider">
            <input required value={f.provider} onInput={(e) => setF({ ...f, provider: e.currentTarget.value })} />
          </Field>
          <button type="submit" disabled={save.busy}>
            Save route
          </button>
          <ErrorBox error={save.error} />
        </form>
      ) : null}
    </Screen>
  );
}
