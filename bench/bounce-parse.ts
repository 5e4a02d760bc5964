/**
 * `npm run bench:bounce-parse`: parseReport messages per second on one core (one event loop,
 * sequential awaits) for typical 5–20 KB reports, against bare mailparser `simpleParser` of the
 * same messages in the same run (the MIME work every parser must do). Goal ≥ 2,000/s;
 * Sisimai publishes 305/s in Ruby. Also printed apart: the structured reports (multipart/report,
 * the light MIME pass) and the rest (plain-text bounces and auto-replies, read by mailparser).
 *
 * The corpus is the committed fixtures (test/fixtures/bounces), each padded with a returned
 * original body so that sizes spread over 5–20 KB, as real DSNs that return the message do.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import { parseReport } from '../src/shared/mail/bounce/parse.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const root = join(import.meta.dirname, '../test/fixtures/bounces');

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
