/**
 * `lettermill bounce parse FILE...`: the inbound server's parser over stored messages, one
 * JSON line per file and recipient in the shape decisions.md pins. `-` is standard input. An
 * unreadable file is reported on stderr and the others are still parsed; the exit code says so.
 *
 * Throughput (issue 43): files are read a few at a time ahead of the parser, so the disk's
 * latency hides behind the parsing, and the output leaves in blocks rather than a write per
 * line; the lines keep the order of the arguments.
 */
import { readFile } from 'node:fs/promises';
import { parseReport } from '../shared/mail/bounce/parse.js';

export interface BounceParseIo {
  out: (line: string) => void;
  err: (line: string) => void;
  stdin: () => Promise<Buffer>;
  /** Waits until what `out` took has been handed on (the process's stdout: drained). */
  flush?: () => Promise<void>;
}

/** Files read ahead of the one being parsed. */
const READ_AHEAD = 8;
/** Output bytes gathered before one write. */
const OUT_BLOCK = 64 * 1024;

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

let pending = '';
let draining: Promise<void> | null = null;

function write(): void {
  const chunk = pending;
  pending = '';
  if (!process.stdout.write(chunk) && !draining) draining = new Promise((resolve) => process.stdout.once('drain', () => ((draining = null), resolve())));
}

export const processIo: BounceParseIo = {
  out: (line) => {
    pending += `${line}\n`;
    if (pending.length >= OUT_BLOCK) write();
  },
  err: (line) => process.stderr.write(`${line}\n`),
  stdin: readStdin,
  flush: async () => {
    if (pending) write();
    // A full pipe: wait for the reader before more output piles up in memory.
    while (draining) await draining;
  },
};

/** Returns the exit code: 0, or 1 when a file could not be read. */
export async function bounceParse(files: string[], io: BounceParseIo = processIo): Promise<number> {
  let code = 0;
  // `-` is read when its turn comes (standard input is read once, in order).
  const read = (file: string) => (file === '-' ? null : readFile(file));
  const ahead: (Promise<Buffer> | null)[] = [];
  const settle = (p: Promise<Buffer> | null) => p?.catch(() => {}); // rejections are taken in turn below
  for (let i = 0; i < Math.min(READ_AHEAD, files.length); i++) settle((ahead[i] = read(files[i]!)));
  for (let i = 0; i < files.length; i++) {
    const file = files[i]!;
    const next = i + READ_AHEAD;
    if (next < files.length) settle((ahead[next] = read(files[next]!)));
    let raw: Buffer;
    try {
      raw = await (ahead[i] ?? io.stdin());
    } catch (err) {
      io.err(`lettermill bounce parse: ${file}: ${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.replace(/\s+/g, ' '));
      code = 1;
      continue;
    } finally {
      ahead[i] = null;
    }
    const report = await parseReport(raw);
    for (const r of report.recipients) {
      io.out(
        JSON.stringify({
          file,
          recipient: r.recipient,
          status: r.status,
          replyCode: r.replyCode,
          reason: r.reason,
          hardBounce: r.hardBounce,
          feedbackType: report.feedbackType,
        }),
      );
    }
    if (io.flush && i % 256 === 255) await io.flush();
  }
  await io.flush?.();
  return code;
}
