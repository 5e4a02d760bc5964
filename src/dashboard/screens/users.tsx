/** Users and roles (admin only), and the audit log of who changed what. */
import { useState } from 'preact/hooks';
import { api, qs, type Page } from '../api.js';
import { ErrorBox, Field, Notice, Pager, Screen, useAction, useCursorPage, useListPage, useSession, when } from '../ui.js';

interface Account {
  id: string;
  email: string;
  role: string;
  createdAt: string;
  disabled: boolean;
}

const ROLES = ['admin', 'editor', 'viewer'];

interface AuditEntry {
  id: string;
  actor: { id: string | null; name: string; role: string };
  method: string;
  route: string;
  targetId: string | null;
  status: number;
  createdAt: string;
}

export function Users() {
  const me = useSession().user;
  const l = useListPage(() => api<{ data: Account[] }>('GET', '/admin/users'), []);
  const audit = useCursorPage((cursor) => api<Page<AuditEntry>>('GET', `/admin/audit-log${qs({ cursor })}`), []);
  const [f, setF] = useState({ email: '', password: '', role: 'viewer' });
  const add = useAction();
  const change = useAction();
  if (me.role !== 'admin') return <Screen title="Users"><Notice>Only admins manage users.</Notice></Screen>;
  return (
    <Screen title="Users">
      <ErrorBox error={l.error ?? change.error} />
      <div class="table-wrap">
        <table>
          <caption class="sr-only">Users</caption>
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Role</th>
              <th scope="col">Since</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {l.rows.map((u) => (
              <tr key={u.id}>
                <td>{u.email}</td>
                <td>
                  <select
                    aria-label={`Role of ${u.email}`}
                    value={u.role}
                    disabled={u.id === me.id}
                    onChange={(e) => {
                      const role = e.currentTarget.value;
                      void change.run(async () => {
                        await api('PATCH', `/admin/users/${u.id}`, { role });
                        l.reload();
                      });
                    }}
                  >
                    {ROLES.map((r) => (
                      <option key={r}>{r}</option>
                    ))}
                  </select>
                </td>
                <td>{u.disabled ? 'disabled' : when(u.createdAt)}</td>
                <td>
                  {u.id !== me.id ? (
                    <button
                      type="button"
                      aria-label={`Remove ${u.email}`}
                      onClick={() =>
                        change.run(async () => {
                          if (!confirm(`Remove ${u.email}?`)) return;
                          await api('DELETE', `/admin/users/${u.id}`);
                          l.reload();
                        })
                      }
                    >
                      Remove
                    </button>
                  ) : (
                    'you'
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager p={l.pager} label="Users" />
      <form
        class="card row"
        aria-label="New user"
        onSubmit={(e) => {
          e.preventDefault();
          void add.run(async () => {
            await api('POST', '/admin/users', f);
            setF({ email: '', password: '', role: 'viewer' });
            l.reload();
          });
        }}
      >
        <Field label="Email">
          <input type="email" required value={f.email} onInput={(e) => setF({ ...f, email: e.currentTarget.value })} />
        </Field>
        <Field label="Password">
          <input type="password" autoComplete="new-password" required value={f.password} onInput={(e) => setF({ ...f, password: e.currentTarget.value })} />
        </Field>
        <Field label="Role">
          <select value={f.role} onChange={(e) => setF({ ...f, role: e.currentTarget.value })}>
            {ROLES.map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </Field>
        <button type="submit" disabled={add.busy}>
          Add user
        </button>
        <ErrorBox error={add.error} />
      </form>
      <h2>Audit log</h2>
      <ErrorBox error={audit.error} />
      <ol class="timeline">
        {audit.data?.data.map((e) => (
          <li key={e.id}>
            <strong>
              {e.method} {e.route}
            </strong>{' '}
            · {when(e.createdAt)} · {e.actor.name} ({e.actor.role}){e.targetId ? ` · ${e.targetId}` : ''} · {e.status}
          </li>
        ))}
      </ol>
      <Pager p={audit} label="Audit log" />
    </Screen>
  );
}
