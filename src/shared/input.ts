/**
 * The input policy every HTTP door of both halves applies before any work (docs/api.md →
 * "Input policy"): text PostgreSQL cannot store is refused, and parsed bodies have a depth
 * limit. PostgreSQL refuses the byte 0x00 in text and jsonb, and the UTF-8 encoder turns an
 * unpaired UTF-16 surrogate into U+FFFD, so a value with either would fail its write (a 500)
 * or be stored as something else than was sent.
 *
 * The walk is iterative (an explicit stack), so no input depth can overflow the call stack,
 * and it stops at the depth limit, which bounds every later walk over the same value.
 */
import { EDGE_POLICY } from './edge-policy.js';

export type InputFaultReason = 'invalid_text' | 'too_deep' | 'forbidden_key';

export interface InputFault {
  reason: InputFaultReason;
  /** Where, as `body.headers.X-Tag`, `query.search`, `params.id`. */
  path: string;
  message: string;
}

type WellFormed = { isWellFormed(): boolean };

/** What makes `s` unstorable as PostgreSQL text, or null. */
export function textFault(s: string): string | null {
  if (s.includes('\0')) return 'a NUL character';
  if (!(s as unknown as WellFormed).isWellFormed()) return 'an unpaired UTF-16 surrogate';
  return null;
}

/** JSON.parse's objects, querystring's null-prototype objects and arrays: the containers a parser builds. */
function isContainer(v: unknown): v is Record<string, unknown> | unknown[] {
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) return true;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

interface Frame {
  value: unknown;
  depth: number;
  parent: Frame | null;
  key: string;
}

function pathOf(f: Frame, last?: string): string {
  const parts: string[] = last === undefined ? [] : [last];
  for (let x: Frame | null = f; x; x = x.parent) parts.push(x.key);
  return parts.reverse().join('.');
}

const label = (s: string) => JSON.stringify(s.length > 60 ? `${s.slice(0, 60)}…` : s);

/**
 * The first fault in a parsed value: a string or key with text PostgreSQL cannot store,
 * containers nested deeper than `maxDepth`, or (with `forbiddenKeys`) a `__proto__` key or a
 * `constructor` key holding a `prototype` (what secure-json-parse refuses). Null when clean.
 * Anything that is not a parser's container (a Buffer, a stream) is left alone.
 */
export function findInputFault(value: unknown, root: string, opts: { maxDepth?: number; forbiddenKeys?: boolean } = {}): InputFault | null {
  const maxDepth = opts.maxDepth ?? EDGE_POLICY.maxJsonDepth;
  if (typeof value === 'string') {
    const t = textFault(value);
    return t ? { reason: 'invalid_text', path: root, message: `${root} contains ${t}, which cannot be stored` } : null;
  }
  if (!isContainer(value)) return null;
  const stack: Frame[] = [{ value, depth: 1, parent: null, key: root }];
  while (stack.length) {
    const f = stack.pop()!;
    if (f.depth > maxDepth) {
      return { reason: 'too_deep', path: pathOf(f), message: `${root} is nested more than ${maxDepth} levels deep` };
    }
    const c = f.value as Record<string, unknown>;
    const array = Array.isArray(c);
    const keys = array ? null : Object.keys(c);
    const n = array ? (c as unknown as unknown[]).length : keys!.length;
    for (let i = 0; i < n; i++) {
      const key = array ? String(i) : keys![i]!;
      const v = array ? (c as unknown as unknown[])[i] : c[key];
      if (!array) {
        const kt = textFault(key);
        if (kt) return { reason: 'invalid_text', path: pathOf(f), message: `${pathOf(f)} has a key that contains ${kt}, which cannot be stored` };
        if (opts.forbiddenKeys && (key === '__proto__' || (key === 'constructor' && isContainer(v) && Object.hasOwn(v, 'prototype')))) {
          return { reason: 'forbidden_key', path: pathOf(f, key), message: `${pathOf(f, label(key))} is a forbidden key` };
        }
      }
      if (typeof v === 'string') {
        const t = textFault(v);
        if (t) {
          const p = pathOf(f, array ? `${i}` : key);
          return { reason: 'invalid_text', path: p, message: `${p} contains ${t}, which cannot be stored` };
        }
      } else if (isContainer(v)) {
        stack.push({ value: v, depth: f.depth + 1, parent: f, key });
      }
    }
  }
  return null;
}

/** Headers, path parameters and the query string of a request: the first fault, or null. */
export function findRequestFault(parts: { params?: unknown; query?: unknown; headers?: unknown }): InputFault | null {
  for (const [root, v] of [['params', parts.params], ['query', parts.query], ['headers', parts.headers]] as const) {
    // The router's and the query parser's objects have prototypes of their own: copy the
    // own fields into a plain object, whose values (strings, arrays of strings) are walked.
    const f = v && typeof v === 'object' ? findInputFault({ ...v }, root) : null;
    if (f) return f;
  }
  return null;
}

/** Bodies a route's own parser already walked (the MTA's /send), so the edge does not walk them twice. */
const checked = new WeakSet<object>();
export function markChecked(body: object): void {
  checked.add(body);
}
export function wasChecked(body: unknown): boolean {
  return typeof body === 'object' && body !== null && checked.has(body);
}
