/**
 * The layout's rules, checked: dependencies point runtime → backend | mta → shared; the
 * backend and the MTA never import each other (they talk over HTTP); no runtime import cycles;
 * each database function has one source, its file in db/functions.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const SRC = join(ROOT, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sourceFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Relative imports that load code at run time (`import type` is erased and cannot cycle). */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)\s+(?!type\b)[^'";]*?from\s+'(\.[^']+)'/gm)].map((m) =>
    resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts')),
  );
}

const files = sourceFiles(SRC);
const graph = new Map(files.map((f) => [f, runtimeImports(f).filter((d) => files.includes(d))]));
const area = (f: string) => relative(SRC, f).split('/')[0]!;

describe('architecture', () => {
  it('dependencies point runtime → backend | mta → shared', () => {
    const allowed: Record<string, string[]> = {
      shared: ['shared'],
      backend: ['backend', 'shared'],
      mta: ['mta', 'shared'],
      runtime: ['runtime', 'backend', 'mta', 'shared'],
      'cli.ts': ['runtime', 'shared'],
    };
    const violations: string[] = [];
    for (const [file, deps] of graph) {
      for (const dep of deps) {
        if (!(allowed[area(file)] ?? []).includes(area(dep))) violations.push(`${relative(ROOT, file)} → ${relative(ROOT, dep)}`);
      }
    }
    expect(violations).toEqual([]);
  });

  it('has no runtime import cycles', () => {
    const state = new Map<string, 'open' | 'done'>();
    const cycles: string[] = [];
    const visit = (node: string, stack: string[]) => {
      state.set(node, 'open');
      stack.push(node);
      for (const dep of graph.get(node) ?? []) {
        if (state.get(dep) === 'open') cycles.push([...stack.slice(stack.indexOf(dep)), dep].map((f) => relative(ROOT, f)).join(' → '));
        else if (!state.has(dep)) visit(dep, stack);
      }
      stack.pop();
      state.set(node, 'done');
    };
    for (const f of files) if (!state.has(f)) visit(f, []);
    expect(cycles).toEqual([]);
  });

  it('the MTA pipeline is ten phase files in order', () => {
    const phases = readdirSync(join(SRC, 'mta/pipeline')).filter((f) => /^\d\d-/.test(f)).sort();
    expect(phases.map((f) => f.slice(0, 2))).toEqual(['01', '02', '03', '04', '05', '06', '07', '08', '09', '10']);
  });

  it('no migration defines a function; each function is defined in one file of db/functions', () => {
    const migrations = join(SRC, 'shared/db/migrations');
    const defining = readdirSync(migrations).filter((f) => /\bCREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b/i.test(readFileSync(join(migrations, f), 'utf8')));
    expect(defining).toEqual([]);

    const dir = join(SRC, 'shared/db/functions');
    const filesOf = new Map<string, Set<string>>();
    for (const file of readdirSync(dir)) {
      const text = readFileSync(join(dir, file), 'utf8');
      // Re-applied over what is there: a plain CREATE would fail the second time.
      expect(text, file).not.toMatch(/\bCREATE\s+FUNCTION\b/i);
      for (const [, name] of text.matchAll(/\bCREATE\s+OR\s+REPLACE\s+FUNCTION\s+(\w+)/gi)) {
        filesOf.set(name!.toLowerCase(), (filesOf.get(name!.toLowerCase()) ?? new Set()).add(file));
      }
    }
    expect(filesOf.size).toBeGreaterThan(0);
    expect([...filesOf].filter(([, files]) => files.size > 1)).toEqual([]);
  });
});
