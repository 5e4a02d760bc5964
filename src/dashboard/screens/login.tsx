/** Sign in, or create the first admin with ADMIN_TOKEN on a fresh install. */
import { useState } from 'preact/hooks';
import { api, type User } from '../api.js';
import type { AuthMode } from '../main.js';
import { ErrorBox, Field, Notice, useAction } from '../ui.js';

type SignedIn = (user: User, csrf: string) => void;

export function Login({ mode, notice, onSignedIn }: { mode: AuthMode; notice?: string; onSignedIn: SignedIn }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [adminToken, setToken] = useState('');
  const a = useAction();
  const setup = mode.setupNeeded;

  const submit = (e: Event) => {
    e.preventDefault();
    void a.run(async () => {
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
        {notice && !a.error ? <Notice>{notice}</Notice> : null}
        {setup ? <p>This server has no users yet. Prove you run it with its ADMIN_TOKEN, then choose the admin's email and password.</p> : null}
        {setup ? (
          <Field label="Admin token">
            <input type="password" name="adminToken" autoComplete="off" required value={adminToken} onInput={(e) => setToken(e.currentTarget.value)} />
          </Field>
        ) : null}
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
        <ErrorBox error={a.error} />
        <button type="submit" class="primary" disabled={a.busy}>
          {setup ? 'Create admin and sign in' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}
