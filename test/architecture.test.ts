/**
 * The layout's rules, checked: dependencies point runtime → backend | mta → shared, and the
 * dashboard (src/dashboard, the browser app) imports no server code at run time; the
 * backend and the MTA never import each other (they talk over HTTP); no runtime import cycles;
 * each database function has one source, its file in db/functions; one address grammar, one
 * HTML escaper, one DNS resolver factory; configuration read as values, never written after it
 * is prepared; one derivation of an MTA enqueue; one outbox write path, no event JSON
 * assembled in SQL.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SEND_STATUSES } from '../src/backend/sends/status.js';

const ROOT = resolve(import.meta.dirname, '..');
const SRC = join(ROOT, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sourceFiles(p) : /\.tsx?$/.test(p) ? [p] : [];
  });
}

/** Relative imports that load code at run time (`import type` is erased and cannot cycle). */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)\s+(?!type\b)[^'";]*?from\s+'(\.[^']+)'/gm)].map((m) =>
    resolve(dirname(file), m[1]!.replace(/\.js$/, existsSync(resolve(dirname(file), m[1]!.replace(/\.js$/, '.tsx'))) ? '.tsx' : '.ts')),
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
      // The browser app: talks to the server over HTTP only; type imports are fine.
      dashboard: ['dashboard'],
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

  it('one address parser: only src/shared/mail/address.ts parses, checks or converts an address', () => {
    const owner = join(SRC, 'shared/mail/address.ts');
    // Files allowed an exception while they move to the owner (none now); an entry must go once
    // its file no longer needs it.
    const pending: string[] = [];
    const signs: [string, RegExp][] = [
      ['parses addresses or converts domain names', /nodemailer\/lib\/(?:addressparser|punycode)|\bdomainToASCII\b|\bpunycode\b/],
      ['has an addr-spec pattern (`@` then a domain pattern)', /@[[(]/],
    ];
    // A function named like an address check is fine when it delegates to the owner.
    const checker = /\bfunction\s+(?:parse|is|normali[sz]e|norm|valid(?:ate)?|check|require)(?:Mailbox|Email|Address)\b/;
    const importsOwner = (file: string) => (graph.get(file) ?? []).includes(owner);
    const found = new Map<string, string[]>();
    for (const file of files) {
      if (file === owner) continue;
      const text = readFileSync(file, 'utf8');
      const why = signs.filter(([, re]) => re.test(text)).map(([w]) => w);
      if (checker.test(text) && !importsOwner(file)) why.push('defines an address check without using the owner');
      if (why.length) found.set(file, why);
    }
    const violations = [...found].filter(([f]) => !pending.includes(f)).map(([f, why]) => `${relative(ROOT, f)}: ${why.join('; ')}`);
    expect(violations).toEqual([]);
    expect(pending.filter((f) => !found.has(f)).map((f) => `${relative(ROOT, f)} no longer needs its exception`)).toEqual([]);
  });

  /** `file:line: text` of each line of each source file (but `owner`) that matches one of `signs`. */
  const linesMatching = (owner: string, signs: RegExp[]) =>
    files
      .filter((f) => f !== owner)
      .flatMap((f) => readFileSync(f, 'utf8').split('\n').flatMap((line, i) => (signs.some((re) => re.test(line)) ? [`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`] : [])));

  it('one HTML escaper: only src/shared/html.ts defines an escape*Html/Attr/Xml function or writes an entity table', () => {
    // The dashboard (Preact) escapes through the DOM and may not import it; it needs none.
    const signs = [
      /\b(?:function|const|let|var)\s+\w*(?:escape\w*(?:html|xml|attr)|html\w*escape)\w*\b/i,
      // An entity as a replacement: `'&amp;'`, `'&#39;'`, or a numeric `&#${…};`.
      /['"`]&(?:amp|lt|gt|quot|apos|#0*39|#x27);['"`]|&#\$\{/,
    ];
    expect(linesMatching(join(SRC, 'shared/html.ts'), signs)).toEqual([]);
  });

  it('one DNS resolver factory: only src/shared/net/resolver.ts constructs a Resolver or sets its servers', () => {
    const signs = [/\bnew\s+(?:[\w$]+\.)*Resolver\s*\(/, /\.setServers\s*\(/, /\bimport\s*\{[^}]*\bResolver\b[^}]*\}\s*from\s*'(?:node:)?dns(?:\/promises)?'/];
    expect(linesMatching(join(SRC, 'shared/net/resolver.ts'), signs)).toEqual([]);
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

  describe('the backend ↔ MTA contract lives in src/shared/contracts/mta.ts', () => {
    const CONTRACT = join(SRC, 'shared/contracts/mta.ts');
    const text = (f: string) => readFileSync(f, 'utf8');
    const others = files.filter((f) => f !== CONTRACT);

    it('both halves import it; the dashboard, which reads the MTA through the admin proxy, only its types', () => {
      const importers = files.filter((f) => /from '[./]*shared\/contracts\/mta\.js'/.test(text(f)));
      expect(new Set(importers.map((f) => area(f)).filter((a) => a !== 'dashboard'))).toEqual(new Set(['backend', 'mta']));
      for (const f of importers.filter((x) => area(x) === 'dashboard')) expect(text(f), relative(ROOT, f)).not.toMatch(/import \{[^}]*\} from '[./]*shared\/contracts\/mta\.js'/);
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

  it('the backend learns of MTA results through its events only: no read of the MTA delivery log, no parse of a log reason', () => {
    // The dashboard's read-only proxy of /delivery-logs/stats (src/backend/ui/mta-proxy.ts) shows the MTA's counts; it records nothing.
    const backend = files.filter((f) => area(f) === 'backend' && !f.endsWith('backend/ui/mta-proxy.ts'));
    const offenders = backend.filter((f) => /delivery-logs|suppressed: \(|MtaDeliveryLogPageSchema/.test(readFileSync(f, 'utf8')));
    expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
  });

  it('one module writes email_sends transitions (src/backend/sends/)', () => {
    const offenders = files.filter((f) => /UPDATE email_sends/.test(readFileSync(f, 'utf8')) && !relative(SRC, f).startsWith('backend/sends/'));
    expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
  });

  it('one derivation of an MTA enqueue: its group key is built only by toEnqueueInput (src/mta/job.ts)', () => {
    // Reading a stored job's key (`job.groupKey`) or declaring it in a schema is not building one.
    const builds = /\bgroupKey\s*:(?!\s*(?:Type\.|[\w.]+\.groupKey\b))|\bgroupKeyOf\(/;
    const owner = join(SRC, 'mta/job.ts');
    const offenders = files
      .filter((f) => area(f) === 'mta' && f !== owner)
      .flatMap((f) => readFileSync(f, 'utf8').split('\n').flatMap((line, i) => (builds.test(line) ? [`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`] : [])));
    expect(offenders).toEqual([]);
    expect(readFileSync(owner, 'utf8')).toMatch(/export function toEnqueueInput\b/);
  });

  it('one outbox write path: rows go in by insertEventsSql (src/mta/outbox/store.ts), their JSON built in TypeScript, none assembled in SQL', () => {
    const owner = join(SRC, 'mta/outbox/store.ts');
    const mta = files.filter((f) => area(f) === 'mta');
    const inserts = mta.filter((f) => f !== owner && /INSERT\s+INTO\s+mta_outbox\b/i.test(readFileSync(f, 'utf8')));
    expect(inserts.map((f) => relative(ROOT, f))).toEqual([]);
    // Every statement that writes events (insertEventsSql's callers) builds no JSON in SQL.
    const sqlJson = /\b(?:jsonb?_build_object|jsonb?_agg|row_to_json|to_jsonb?|jsonb?_object)\s*\(/i;
    const writers = mta.filter((f) => /\binsertEventsSql\b|\bmta_outbox\b/.test(readFileSync(f, 'utf8')));
    expect(writers.length).toBeGreaterThan(2);
    expect(writers.filter((f) => sqlJson.test(readFileSync(f, 'utf8'))).map((f) => relative(ROOT, f))).toEqual([]);
  });

  describe('the email_sends status module (src/backend/sends/status.ts)', () => {
    const MODULE = 'backend/sends/status.ts';
    // Migrations are history: 078 spells the list the database checks (a test compares it with SEND_STATUSES).
    const others = files.filter((f) => relative(SRC, f) !== MODULE && !relative(SRC, f).startsWith('shared/db/migrations/'));
    const statuses: ReadonlySet<string> = new Set(SEND_STATUSES);

    it('is the one INSERT INTO email_sends', () => {
      const offenders = files.filter((f) => /INSERT\s+INTO\s+email_sends\b/i.test(readFileSync(f, 'utf8')) && relative(SRC, f) !== MODULE);
      expect(offenders.map((f) => relative(ROOT, f))).toEqual([]);
    });

    it('holds the one list of statuses: no literal list elsewhere of more than half of them, all statuses', () => {
      // Array literals, SQL IN (...) lists and Type.Union([Type.Literal(...), ...]) alike; a
      // subset a policy needs is derived from the module's arrays (feedback/policy.ts → ACTIVITY_STATUSES).
      const list = /[[(]\s*'[a-z_]+'(?:\s*,\s*'[a-z_]+')+\s*,?\s*[\])]/g;
      const offenders = others.flatMap((f) => {
        const text = readFileSync(f, 'utf8').replace(/Type\.Literal\(('[a-z_]+')\)/g, '$1');
        return [...text.matchAll(list)]
          .map((m) => [...m[0].matchAll(/'([a-z_]+)'/g)].map((w) => w[1]!))
          .filter((words) => words.every((w) => statuses.has(w)) && words.length > statuses.size / 2)
          .map((words) => `${relative(ROOT, f)}: ${words.join(', ')}`);
      });
      expect(offenders).toEqual([]);
    });
  });

  it('configuration is read as values: no `() => …config.` lambda, no write to it outside src/shared/config.ts', () => {
    // It is frozen once prepared; what is known only later (the peers' URLs) is an option.
    const lambda = /\(\)\s*=>[^;\n]*?\bconfig\s*[.[]/;
    const write = /\bconfig\)?(?:\.\w+|\[[^\]\n]+\])\s*(?:\?\?|\|\||&&|[-+*/%])?=(?!=)|Object\.(?:assign|defineProperty)\(\s*[\w.]*\bconfig\b|\bdelete\s+[\w.]*\bconfig\s*[.[]/;
    const offenders = (re: RegExp) =>
      files.flatMap((f) => readFileSync(f, 'utf8').split('\n').flatMap((line, i) => (re.test(line) ? [`${relative(ROOT, f)}:${i + 1}: ${line.trim()}`] : [])));
    expect(offenders(lambda)).toEqual([]);
    expect(offenders(write).filter((o) => !o.startsWith('src/shared/config.ts:'))).toEqual([]);
  });
});
