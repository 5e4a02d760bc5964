/** A small history-API router: the path is the state; links are real <a href>s. */
import { useEffect, useState } from 'preact/hooks';

const listeners = new Set<() => void>();
export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  listeners.forEach((l) => l());
}
addEventListener('popstate', () => listeners.forEach((l) => l()));

export function usePath(): string {
  const [path, setPath] = useState(location.pathname + location.search);
  useEffect(() => {
    const l = () => setPath(location.pathname + location.search);
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return path;
}

/** Same-origin left clicks on <a href="/..."> navigate without a reload. */
export function interceptLinks(root: HTMLElement): void {
  root.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = (e.target as Element).closest('a');
    if (!a || a.target || a.hasAttribute('download')) return;
    const href = a.getAttribute('href');
    if (!href || !href.startsWith('/') || href.startsWith('//') || a.dataset.external !== undefined) return;
    e.preventDefault();
    navigate(href);
  });
}
