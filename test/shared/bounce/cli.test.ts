/**
 * `lettermill bounce parse` as an operator runs it: the built CLI (npm run build) as a child
 * process, reading the rules file shipped in dist/.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../../..');
const CLI = join(ROOT, 'dist/cli.js');
const FIX = join(ROOT, 'test/fixtures/bounces');

function run(args: string[], stdin?: Buffer): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [CLI, 'bounce', 'parse', ...args], { cwd: ROOT, timeout: 30_000 }, (error, out, err) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, out, err });
    });
    child.stdin!.end(stdin ?? '');
  });
}

const lines = (out: string) => out.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);

describe('lettermill bounce parse', () => {
  it('is built (npm run build ships dist/cli.js and the rules file)', () => {
    expect(existsSync(CLI)).toBe(true);
    expect(existsSync(join(ROOT, 'dist/shared/mail/bounce/reasons.toml'))).toBe(true);
  });

  it('prints exactly the pinned fields, one line per file and recipient, null when absent', async () => {
    const dsn = join(FIX, 'vendor/exim.eml');
    const arf = join(FIX, 'vendor/arf-cfbl.eml');
    const r = await run([dsn, arf]);
    expect(r).toMatchObject({ code: 0, err: '' });
    expect(lines(r.out)).toEqual([
      { file: dsn, recipient: 'full@exim.example', status: '5.2.2', replyCode: 552, reason: 'mailboxfull', hardBounce: false, feedbackType: null },
      { file: arf, recipient: 'reader@mailbox.example', status: null, replyCode: null, reason: 'feedback', hardBounce: false, feedbackType: 'abuse' },
    ]);
  });

  it('- reads standard input', async () => {
    const r = await run(['-'], readFileSync(join(FIX, 'vendor/sendmail.eml')));
    expect(r.code).toBe(0);
    expect(lines(r.out)).toEqual([
      { file: '-', recipient: 'gone@sendmail.example', status: '5.1.1', replyCode: 550, reason: 'userunknown', hardBounce: true, feedbackType: null },
    ]);
  });

  it('an unreadable file: a message on stderr, the other files still parsed, a non-zero exit', async () => {
    const missing = join(FIX, 'no-such-file.eml');
    const good = join(FIX, 'vendor/qmail.eml');
    const r = await run([missing, good, FIX]);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain(missing);
    expect(r.err).toContain('ENOENT');
    expect(r.err).toContain('EISDIR');
    expect(lines(r.out)).toEqual([expect.objectContaining({ file: good, recipient: 'nobody@qmail.example', reason: 'userunknown', hardBounce: true })]);
  });

  it('many files (read ahead, output in blocks): one line per file and recipient in argument order, a missing one reported', async () => {
    const corpus = readdirSync(join(FIX, 'corpus')).filter((f) => f.endsWith('.eml')).sort().map((f) => join(FIX, 'corpus', f));
    const missing = join(FIX, 'corpus/no-such.eml');
    const args = [...corpus.slice(0, 20), missing, ...corpus.slice(20), ...corpus];
    const r = await run(args);
    expect(r.code).toBe(1);
    expect(r.err.trim().split('\n')).toEqual([expect.stringContaining(`${missing}: ENOENT`)]);
    const files = lines(r.out).map((l) => l.file);
    // Each file's lines together, files in the order given (a file with two recipients gives two lines).
    expect(files.filter((f, i) => f !== files[i - 1])).toEqual(args.filter((f) => f !== missing));
  });

  it('garbage is one line with reason undefined, exit 0', async () => {
    const r = await run([join(FIX, 'vendor/garbage.eml')]);
    expect(r.code).toBe(0);
    expect(lines(r.out)).toEqual([expect.objectContaining({ recipient: null, status: null, reason: 'undefined', hardBounce: false })]);
  });

  it('without a file: usage and exit 2', async () => {
    const r = await run([]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('lettermill bounce parse FILE');
  });
});

describe('lettermill bounce parse start-up', () => {
  it('reports and plain-text bounces are read without loading mailparser (most of the start-up)', async () => {
    // Every fixture but the one that needs it (garbage: no header block the light passes take).
    const script = `
      import { createRequire } from 'node:module';
      import { readFileSync, readdirSync, statSync } from 'node:fs';
      import { join } from 'node:path';
      const { parseReport } = await import(${JSON.stringify(join(ROOT, 'dist/shared/mail/bounce/parse.js'))});
      const files = (d) => readdirSync(d).flatMap((n) => { const p = join(d, n); return statSync(p).isDirectory() ? files(p) : n.endsWith('.eml') ? [p] : []; });
      const all = files(${JSON.stringify(FIX)}).filter((f) => !/garbage/.test(f));
      for (const f of all) await parseReport(readFileSync(f));
      const loaded = Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/mailparser/'));
      const last = await parseReport(readFileSync(${JSON.stringify(join(FIX, 'vendor/garbage.eml'))}));
      console.log(JSON.stringify({ files: all.length, loaded, after: Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/mailparser/')), kind: last.kind }));
    `;
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, timeout: 30_000 }, (e, o) => (e ? reject(e) : resolve(o))),
    );
    const r = JSON.parse(out) as { files: number; loaded: boolean; after: boolean; kind: string };
    expect(r.files).toBeGreaterThan(150);
    expect(r).toMatchObject({ loaded: false, after: true, kind: 'unknown' });
  });
});
