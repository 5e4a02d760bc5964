/**
 * `{{ name }}` variables for transactional content. In HTML values are escaped; in the
 * subject and text they are inserted as given. A variable the content uses but the request
 * does not define is an error listing every missing name (nothing is sent half-filled).
 * Hand-written because it is a dozen lines and a template engine would bring logic (loops,
 * partials) that user-supplied templates must not run.
 */
import { escapeHtml } from '../../shared/html.js';

const VAR = /\{\{\s*([A-Za-z_][A-Za-z0-9_.-]{0,99})\s*\}\}/g;

export type Variables = Record<string, string | number | boolean | null>;

export function referencedVariables(...parts: (string | undefined)[]): Set<string> {
  const names = new Set<string>();
  for (const p of parts) if (p) for (const m of p.matchAll(VAR)) names.add(m[1]);
  return names;
}

/** Whether `vars` defines `name` itself: `constructor` or `toString` on the prototype are not variables. */
export const hasVariable = (vars: Variables, name: string): boolean => Object.hasOwn(vars, name);

export function render(template: string, vars: Variables, html: boolean): string {
  return template.replace(VAR, (_, name: string) => {
    const v = hasVariable(vars, name) ? vars[name] : undefined;
    const s = v === null || v === undefined ? '' : String(v);
    return html ? escapeHtml(s) : s;
  });
}
