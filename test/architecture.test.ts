/**
 * The layout's rules, checked: dependencies point runtime → backend | mta → shared; the
 * backend and the MTA never import each other (they talk over HTTP); no runtime import cycles.
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

  describe('the backend ↔ MTA contract lives in src/shared/contracts/mta.ts', () => {
    const CONTRACT = join(SRC, 'shared/contracts/mta.ts');
    const text = (f: string) => readFileSync(f, 'utf8');
    const others = files.filter((f) => f !== CONTRACT);

    it('both halves import it', () => {
      const importers = files.filter((f) => /from '[./]*shared\/contracts\/mta\.js'/.test(text(f))).map((f) => area(f));
      expect(new Set(importers)).toEqual(new Set(['backend', 'mta']));
    });

    it('no event name is written as a literal outside it', () => {
      // Names no other vocabulary uses are refused anywhere; `sent`/`bounced`/`complained`
      // (also statuses) wherever code names an MTA event: emit(...), event(...), case.
      const unique = /(?<!reason: )'(inbound\.received|org\.circuit_breaker|ip\.blocklisted|ip\.delisted|ip\.warming_complete|all_ips_blocked)'/;
      const named = /\.(emit|event)\(\s*'(sent|bounced|complained)'/;
      const offenders = others.filter((f) => (area(f) === 'mta' || f.includes('/feedback/')) && (unique.test(text(f)) || named.test(text(f))));
      expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
      const translate = text(join(SRC, 'backend/feedback/translate/mta.ts'));
      expect(translate).not.toMatch(/case '/);
      // No guessing between field names: the contract names each field once.
      expect(translate).not.toMatch(/data\.\w+ \?\? data\./);
    });

    it('no job field set is declared outside it', () => {
      const offenders = others.filter((f) => /dkimDomain: Type\./.test(text(f)) || /interface \w*Job\w* \{[^}]*dkimDomain/s.test(text(f)));
      expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
    });
  });

  it('one module writes email_sends transitions (src/backend/sends/)', () => {
    const offenders = files.filter((f) => /UPDATE email_sends/.test(readFileSync(f, 'utf8')) && !relative(SRC, f).startsWith('backend/sends/'));
    expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
  });
});
