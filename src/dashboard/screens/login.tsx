/** Sign in, or create the first admin with ADMIN_TOKEN on a fresh install. */
import { useState } from 'preact/hooks';
import { api, setAdminToken, type User } from '../api.js';
import type { AuthMode } from '../main.js';
import { ErrorBox, Field, useAction } from '../ui.js';

type SignedIn = (user: User, csrf: string | null, adminToken?: string) => void;

export function Login({ mode, onSignedIn }: { mode: AuthMode; onSignedIn: SignedIn }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [adminToken, setToken] = useState('');
  const a = useAction();
  const setup = mode.kind === 'session' && mode.setupNeeded;

  const submit = (e: Event) => {
    e.preventDefault();
    void a.run(async () => {
      if (mode.kind === 'token') {
        setAdminToken(adminToken);
        try {
          await api('GET', '/admin/dashboard/stats?days=1');
        } catch (err) {
          setAdminToken(null);
          throw err;
        }
        onSignedIn({ id: 'admin-token', email: 'ADMIN_TOKEN', role: 'admin' }, null, adminToken);
        return;
      }
      const r = setup
        ? await api<{ data: { user: User; csrfToken: string } }>('POST', '/admin/setup', { adminToken, email, password })
        : await api<{ data: { user: User; csrfToken: string } }>('POST', '/admin/session', { email, password });
      onSignedIn(r.data.user, r.data.csrfToken);
    });
  };

  return (
    <main class="center" id="main">
      <form class="card login" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title">{setup ? 'Create the first admin' : 'Sign in to Lettermill'}</h1>
        {setup ? <p>This server has no users yet. Prove you run it with its ADMIN_TOKEN, then choose the admin's email and password.</p> : null}
        {mode.kind === 'token' ? <p>This server has no user accounts yet: sign in with its ADMIN_TOKEN.</p> : null}
        {setup || mode.kind === 'token' ? (
          <Field label="Admin token">
            <input type="password" name="adminToken" autoComplete="off" required value={adminToken} onInput={(e) => setToken(e.currentTarget.value)} />
          </Field>
        ) : null}
        {mode.kind === 'session' ? (
          <>
            <Field label="Email">
              <input type="email" name="email" autoComplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
            </Field>
            <Field label="Password" hint={setup ? 'At least 12 characters.' : undefined}>
              <input
                type="password"
                name="password"
                autoComplete={setup ? 'new-password' : 'current-password'}
                required
                value={password}
                onInput={(e) => setPassword(e.currentTarget.value)}
              />
            </Field>
          </>
        ) : null}
        <ErrorBox error={a.error} />
        <button type="submit" class="primary" disabled={a.busy}>
          {setup ? 'Create admin and sign in' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}
