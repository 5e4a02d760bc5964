/** API keys: create with scopes (the key is shown once), list, revoke. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCanWrite, useListPage, when } from '../ui.js';

// The scopes of /api/v1 (src/backend/api/keys.ts SCOPES); the server rejects unknown ones by name.
const SCOPES = ['contacts:read', 'contacts:write', 'events:write', 'transactional:send', 'topics:write'];

interface Key {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  createdAt: string;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

export function ApiKeys() {
  const l = useListPage(() => api<{ data: Key[] }>('GET', '/admin/api-keys'), []);
  const canWrite = useCanWrite('apiKeys');
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<string[]>(['transactional:send']);
  const [created, setCreated] = useState<string | null>(null);
  const add = useAction();
  const revoke = useAction();
  return (
    <Screen title="API keys">
      <ErrorBox error={l.error ?? revoke.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">API keys</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Key</th>
              <th scope="col">Scopes</th>
              <th scope="col">Last used</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {l.rows.map((k) => (
              <tr key={k.id}>
                <td>{k.name}</td>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td>{k.scopes.join(', ')}</td>
                <td>{when(k.lastUsedAt)}</td>
                <td>
                  {k.revokedAt ? (
                    `revoked ${when(k.revokedAt)}`
                  ) : canWrite ? (
                    <button
                      type="button"
                      aria-label={`Revoke ${k.name}`}
                      disabled={revoke.busy}
                      onClick={() =>
                        revoke.run(async () => {
                          if (!confirm(`Revoke the key “${k.name}”? Requests with it fail from now on.`)) return;
                          await api('DELETE', `/admin/api-keys/${k.id}`);
                          l.reload();
                        })
                      }
                    >
                      Revoke
                    </button>
                  ) : (
                    'active'
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {l.data && !l.rows.length ? <Notice>No API keys yet.</Notice> : null}
      <Pager p={l.pager} label="API keys" />
      {canWrite ? (
        <form
          class="card"
          aria-label="New API key"
          onSubmit={(e) => {
            e.preventDefault();
            void add.run(async () => {
              const r = await api<{ data: { key: string } }>('POST', '/admin/api-keys', { name, scopes });
              setCreated(r.data.key);
              setName('');
              l.reload();
            });
          }}
        >
          <Field label="Key name">
            <input required value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </Field>
          <fieldset>
            <legend>Scopes</legend>
            {SCOPES.map((s) => (
              <label class="radio" key={s}>
                <input type="checkbox" checked={scopes.includes(s)} onChange={(e) => setScopes(e.currentTarget.checked ? [...scopes, s] : scopes.filter((x) => x !== s))} />
                {s}
              </label>
            ))}
          </fieldset>
          <ErrorBox error={add.error} />
          {created ? (
            <Field label="New key (shown once: copy it now)">
              <input readOnly value={created} onFocus={(e) => e.currentTarget.select()} />
            </Field>
          ) : null}
          <button type="submit" disabled={add.busy}>
            Create key
          </button>
        </form>
      ) : null}
    </Screen>
  );
}
