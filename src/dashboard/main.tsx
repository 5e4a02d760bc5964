/** The operator dashboard: sign-in gate, navigation, and one screen per path. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, setCsrf, whenUnauthenticated, type User } from './api.js';
import { interceptLinks, navigate, usePath } from './router.js';
import { Session } from './ui.js';
import { Login } from './screens/login.js';
import { Overview } from './screens/overview.js';
import { Contacts } from './screens/contacts.js';
import { Templates } from './screens/templates.js';
import { Campaigns } from './screens/campaigns.js';
import { Topics } from './screens/topics.js';
import { Transactional } from './screens/transactional.js';
import { Webhooks } from './screens/webhooks.js';
import { ApiKeys } from './screens/api-keys.js';
import { Deliverability } from './screens/deliverability.js';
import { Settings } from './screens/settings.js';
import { Users } from './screens/users.js';
import './style.css';

const NAV: [string, string, ((u: User) => boolean)?][] = [
  ['/overview', 'Overview'],
  ['/contacts', 'Contacts'],
  ['/topics', 'Topics and forms'],
  ['/templates', 'Templates'],
  ['/campaigns', 'Campaigns'],
  ['/transactional', 'Transactional log'],
  ['/webhook-endpoints', 'Webhooks'],
  ['/api-keys', 'API keys'],
  ['/deliverability', 'Deliverability'],
  ['/settings', 'Settings'],
  ['/users', 'Users', (u) => u.role === 'admin'],
];

/** Whether this server still needs its first admin. */
export type AuthMode = { setupNeeded: boolean };

/** Signed in already (one request), else whether the server still needs its first admin. */
async function detect(): Promise<{ mode: AuthMode; user: User | null }> {
  try {
    const s = await api<{ data: { user: User; csrfToken: string } }>('GET', '/admin/session');
    setCsrf(s.data.csrfToken);
    return { mode: { setupNeeded: false }, user: s.data.user };
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 401) throw e;
  }
  const setup = await api<{ data: { needed: boolean } }>('GET', '/admin/setup');
  return { mode: { setupNeeded: setup.data.needed }, user: null };
}

function App() {
  const path = usePath();
  const [state, setState] = useState<{ mode?: AuthMode; user: User | null; error?: string; notice?: string }>({ user: null });
  const [menuOpen, setMenuOpen] = useState(false);
  useEffect(() => {
    detect().then(
      (r) => setState(r),
      (e) => setState({ user: null, error: e instanceof Error ? e.message : String(e) }),
    );
    whenUnauthenticated((notice) => setState((s) => ({ ...s, user: null, notice })));
  }, []);
  useEffect(() => {
    setMenuOpen(false);
    // A new screen: focus goes to its content, as a page load would put it at the top.
    if (document.activeElement && document.activeElement !== document.body) document.getElementById('main')?.focus();
  }, [path.split('?')[0]]);

  if (state.error) return <main class="center"><div class="error" role="alert">{state.error}</div></main>;
  if (!state.mode) return <main class="center"><p role="status">Loading…</p></main>;
  if (!state.user) {
    return (
      <Login
        mode={state.mode}
        notice={state.notice}
        onSignedIn={(user, csrf) => {
          setCsrf(csrf);
          setState({ mode: { setupNeeded: false }, user });
          if (!/^\/[a-z]/.test(location.pathname) || location.pathname === '/login' || location.pathname === '/setup') navigate('/overview', true);
        }}
      />
    );
  }
  const user = state.user;
  const signOut = async () => {
    await api('DELETE', '/admin/session').catch(() => undefined);
    setCsrf(null);
    setState({ mode: state.mode, user: null });
    navigate('/login');
  };
  const section = '/' + (path.split(/[/?]/)[1] || 'overview');
  return (
    <Session.Provider value={{ user, signOut }}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <div class="layout">
        <header class="top">
          <a href="/overview" class="brand">
            Lettermill
          </a>
          <button type="button" class="menu" aria-expanded={menuOpen} aria-controls="nav" onClick={() => setMenuOpen(!menuOpen)}>
            Menu
          </button>
          <span class="who">
            {user.email} · <span class={`role role-${user.role}`}>{user.role}</span>
          </span>
          <button type="button" onClick={signOut}>
            Sign out
          </button>
        </header>
        <nav id="nav" class={menuOpen ? 'side open' : 'side'} aria-label="Sections">
          <ul>
            {NAV.filter(([, , show]) => !show || show(user)).map(([href, label]) => (
              <li key={href}>
                <a href={href} aria-current={section === href ? 'page' : undefined}>
                  {label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <main id="main" tabIndex={-1}>
          <Route path={path} />
        </main>
      </div>
    </Session.Provider>
  );
}

function Route({ path }: { path: string }) {
  const [pathname] = path.split('?');
  const parts = pathname!.split('/').filter(Boolean);
  const rest = parts.slice(1);
  switch (parts[0] ?? 'overview') {
    case 'overview':
    case 'login':
    case 'setup':
      return <Overview />;
    case 'contacts':
      return <Contacts id={rest[0]} />;
    case 'topics':
      return <Topics />;
    case 'templates':
      return <Templates id={rest[0]} />;
    case 'campaigns':
      return <Campaigns id={rest[0]} />;
    case 'transactional':
      return <Transactional id={rest[0]} />;
    case 'webhook-endpoints':
      return <Webhooks id={rest[0]} />;
    case 'api-keys':
      return <ApiKeys />;
    case 'deliverability':
      return <Deliverability tab={rest[0]} />;
    case 'settings':
      return <Settings />;
    case 'users':
      return <Users />;
    default:
      return <p>No such screen.</p>;
  }
}

const root = document.getElementById('app')!;
interceptLinks(root);
render(<App />, root);
