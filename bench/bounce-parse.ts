/**
 * `npm run bench:bounce-parse`: parseReport messages per second on one core (one event loop,
 * sequential awaits) for typical 5–20 KB reports, against bare mailparser `simpleParser` of the
 * same messages in the same run (the MIME work every parser must do). Goal ≥ 2,000/s;
 * Sisimai publishes 305/s in Ruby. Also printed apart: the structured reports (multipart/report,
 * the light MIME pass) and the rest (plain-text bounces and auto-replies, read by mailparser).
 *
 * Then the operator's path: `lettermill bounce parse` (dist/cli.js: the npm script builds first)
 * over ~5,000 of these files written to a temporary directory, two invocations at once, each
 * given half of the files (as `xargs -P2` would), and again in batches of 100 files per
 * invocation (where start-up counts); wall messages per second against the in-process rate of
 * the same run. Goal ≥ 1,000 msg/s wall for the two invocations. `BENCH_CLI_BASELINE=<other
 * build's dist/cli.js>` measures that build too, in the same run (the before of a change).
 *
 * The corpus is the committed fixtures (test/fixtures/bounces), each padded with a returned
 * original body so that sizes spread over 5–20 KB, as real DSNs that return the message do.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import { parseReport } from '../src/shared/mail/bounce/parse.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const CLI_FILES = Number(process.env.BENCH_CLI_FILES ?? 5_000);
const root = join(import.meta.dirname, '../test/fixtures/bounces');
const cli = join(import.meta.dirname, '../dist/cli.js');
const baselineCli = process.env.BENCH_CLI_BASELINE;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : n.endsWith('.eml') && !n.includes('garbage') ? [p] : [];
  });
}

const filler = (n: number) => Array.from({ length: Math.ceil(n / 76) }, (_, i) => `Returned body line ${i} of the original newsletter, plain ASCII text for size.`.padEnd(75, '.')).join('\n');
const all = files(root).map((f, i) => {
  const raw = readFileSync(f, 'latin1');
  const target = 5_000 + ((i * 2_749) % 15_000);
  return Buffer.from(raw.length >= target ? raw : `${raw.trimEnd()}\n${filler(target - raw.length)}\n`, 'latin1');
});

async function rate(label: string, fn: (b: Buffer) => Promise<unknown>, corpus = all): Promise<number> {
  for (const b of corpus) await fn(b); // warm-up: JIT, the rules compile
  let n = 0;
  const start = process.hrtime.bigint();
  const until = start + BigInt(SECONDS * 1e9);
  while (process.hrtime.bigint() < until) {
    for (const b of corpus) await fn(b);
    n += corpus.length;
  }
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  const r = n / s;
  console.log(`${label.padEnd(26)} ${Math.round(r).toLocaleString('en-US')} msg/s (${n} messages in ${s.toFixed(1)} s)`);
  return r;
}

const bytes = all.reduce((a, b) => a + b.length, 0);
console.log(`corpus: ${all.length} reports, ${Math.round(bytes / all.length).toLocaleString('en-US')} bytes on average (min ${Math.min(...all.map((b) => b.length))}, max ${Math.max(...all.map((b) => b.length))})`);
const base = await rate('baseline simpleParser', (b) => simpleParser(b, { keepDeliveryStatus: true, skipHtmlToText: true, skipTextToHtml: true, skipImageLinks: true, skipTextLinks: true }));
const ours = await rate('parseReport', (b) => parseReport(b));
console.log(`ratio parseReport / simpleParser: ${(ours / base).toFixed(2)}; goal ≥ 2,000 msg/s: ${ours >= 2000 ? 'met' : 'missed'}`);
// The two halves: structured reports (multipart/report: the light MIME pass) and the rest
// (plain-text bounces, auto-replies: mailparser reads them).
const structured = all.filter((b) => /^content-type:[ \t]*multipart\/report/im.test(b.toString('latin1').split(/\r?\n\r?\n/)[0]!));
const other = all.filter((b) => !structured.includes(b));
await rate(`  multipart/report (${structured.length})`, (b) => parseReport(b), structured);
await rate(`  other (${other.length})`, (b) => parseReport(b), other);

/** Runs the CLI over `paths` as `invocations` concurrent streams of `batch` files per process; wall seconds. */
async function cliWall(paths: string[], streams: number, batch: number, program = cli): Promise<{ s: number; lines: number }> {
  const per = Math.ceil(paths.length / streams);
  let lines = 0;
  const run = (args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, [program, 'bounce', 'parse', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
      child.stdout.on('data', (c: Buffer) => {
        for (let i = c.indexOf(10); i >= 0; i = c.indexOf(10, i + 1)) lines++;
      });
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bounce parse exited ${code}`))));
    });
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: streams }, async (_, k) => {
      const mine = paths.slice(k * per, (k + 1) * per);
      for (let i = 0; i < mine.length; i += batch) await run(mine.slice(i, i + batch));
    }),
  );
  return { s: Number(process.hrtime.bigint() - start) / 1e9, lines };
}

if (!existsSync(cli)) {
  console.log('lettermill bounce parse: dist/cli.js missing (npm run build first); CLI figures skipped');
} else {
  const dir = mkdtempSync(join(tmpdir(), 'lm-bounce-parse-'));
  try {
    const paths = Array.from({ length: CLI_FILES }, (_, i) => {
      const p = join(dir, `${i}.eml`);
      writeFileSync(p, all[i % all.length]!);
      return p;
    });
    for (const [label, program] of [['', cli], ...(baselineCli ? [[' (baseline build)', baselineCli]] : [])] as [string, string][]) {
      let best = Infinity;
      for (let k = 0; k < 5; k++) best = Math.min(best, (await cliWall([paths[0]!], 1, 1, program)).s);
      console.log(`lettermill bounce parse${label}, one file: ${(best * 1000).toFixed(0)} ms wall (start-up, best of 5)`);
      for (const batch of [Math.ceil(paths.length / 2), 100]) {
        const { s, lines } = await cliWall(paths, 2, batch, program);
        const r = paths.length / s;
        console.log(
          `lettermill bounce parse${label}, 2 concurrent, ${batch} files per invocation: ${Math.round(r).toLocaleString('en-US')} msg/s wall (${paths.length} files, ${lines} lines in ${s.toFixed(2)} s); ratio to in-process ${(r / ours).toFixed(3)}${batch > 100 ? `; goal ≥ 1,000 msg/s: ${r >= 1000 ? 'met' : 'missed'}` : ''}`,
        );
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
