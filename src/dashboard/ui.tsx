/** Shared pieces: loading/error state, cursor pager, labelled fields, role checks. */
import type { ComponentChildren } from 'preact';
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useState } from 'preact/hooks';
import { ApiError, type Page, type User } from './api.js';

export const Session = createContext<{ user: User; signOut: () => void }>(null as never);
export const useSession = () => useContext(Session);

/** What a role may change: admin everything; editor contacts, templates, campaigns; viewer nothing. */
export type Area = 'contacts' | 'templates' | 'campaigns' | 'topics' | 'webhooks' | 'apiKeys' | 'deliverability' | 'settings' | 'users';
const EDITOR_AREAS: Area[] = ['contacts', 'templates', 'campaigns', 'topics'];
export function canWrite(user: User, area: Area): boolean {
  return user.role === 'admin' || (user.role === 'editor' && EDITOR_AREAS.includes(area));
}
export const useCanWrite = (area: Area) => canWrite(useSession().user, area);

export const errorText = (e: unknown) => (e instanceof ApiError ? e.message : e instanceof Error ? e.message : String(e));

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      {errorText(error)}
    </div>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <div class="notice" role="status">
      {children}
    </div>
  );
}

/** Runs a loader when its deps change; reload() re-runs it. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | undefined; error: unknown; loading: boolean; reload: () => void } {
  const [tick, setTick] = useState(0);
  // The answer is kept with the deps it was loaded for: until the new one arrives, loading is
  // true (no render shows old rows as if they were the new page's).
  const key = JSON.stringify([...deps, tick]);
  const [state, setState] = useState<{ key?: string; data?: T; error?: unknown }>({});
  useEffect(() => {
    let live = true;
    load().then(
      (data) => live && setState({ key, data }),
      (error) => live && setState((s) => ({ key, data: s.data, error })),
    );
    return () => {
      live = false;
    };
  }, [key]);
  return { data: state.data, error: state.key === key ? state.error : undefined, loading: state.key !== key, reload: useCallback(() => setTick((t) => t + 1), []) };
}

/** Cursor paging: a stack of the cursors that opened each page, so Previous works too. */
export function useCursorPage<T>(fetchPage: (cursor: string | null) => Promise<Page<T>>, deps: unknown[]) {
  const [stack, setStack] = useState<(string | null)[]>([null]);
  useEffect(() => setStack([null]), deps);
  const cursor = stack[stack.length - 1] ?? null;
  const res = useLoad(() => fetchPage(cursor), [...deps, cursor]);
  return {
    ...res,
    pageNumber: stack.length,
    next: res.data?.pagination.cursor && !res.data.pagination.isDone ? () => setStack([...stack, res.data!.pagination.cursor]) : null,
    prev: stack.length > 1 ? () => setStack(stack.slice(0, -1)) : null,
  };
}

export function Pager({ p, label }: { p: { pageNumber: number; next: (() => void) | null; prev: (() => void) | null; data?: Page<unknown>; loading?: boolean }; label: string }) {
  const total = p.data?.pagination.totalItems;
  return (
    <nav class="pager" aria-label={`${label} pages`}>
      <button type="button" onClick={() => p.prev?.()} disabled={!p.prev || p.loading}>
        Previous
      </button>
      <span role="status">
        {p.loading ? 'Loading… ' : ''}Page {p.pageNumber}
        {total !== undefined ? ` · ${total.toLocaleString('en')} in all` : ''}
      </span>
      <button type="button" onClick={() => p.next?.()} disabled={!p.next || p.loading}>
        Next
      </button>
    </nav>
  );
}

export function Field({ label, children, hint }: { label: string; children: ComponentChildren; hint?: string }) {
  // The hint stays outside the label, so the control's accessible name is the label alone.
  return (
    <div class="field">
      <label>
        <span>{label}</span>
        {children}
      </label>
      {hint ? <small>{hint}</small> : null}
    </div>
  );
}

export function Screen({ title, actions, children }: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · Lettermill`;
  }, [title]);
  return (
    <section class="screen" aria-labelledby="screen-title">
      <header class="screen-head">
        <h1 id="screen-title">{title}</h1>
        {actions ? <div class="actions">{actions}</div> : null}
      </header>
      {children}
    </section>
  );
}

export const when = (iso: string | null | undefined) => (iso ? new Date(iso).toLocaleString('en-GB', { timeZone: 'UTC' }) + ' UTC' : '—');

/** A button that runs an action, shows its error, and is busy meanwhile. */
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = async <T,>(f: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(null);
    try {
      return await f();
    } catch (e) {
      setError(e);
      return undefined;
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, run, setError };
}

/**
 * Pages of 25 over an admin route that answers one capped list (templates, campaigns,
 * topics, forms, webhooks, keys: the server caps those lists at hundreds).
 */
export function useListPage<T>(load: () => Promise<{ data: T[] }>, deps: unknown[], size = 25) {
  const res = useLoad(load, deps);
  const [n, setN] = useState(0);
  const all = res.data?.data ?? [];
  const pages = Math.max(1, Math.ceil(all.length / size));
  const pageNo = Math.min(n, pages - 1);
  return {
    ...res,
    rows: all.slice(pageNo * size, pageNo * size + size),
    pager: {
      pageNumber: pageNo + 1,
      next: pageNo + 1 < pages ? () => setN(pageNo + 1) : null,
      prev: pageNo > 0 ? () => setN(pageNo - 1) : null,
      data: res.data ? { data: all, pagination: { limit: size, cursor: null, isDone: true, totalItems: all.length } } : undefined,
    },
  };
}
