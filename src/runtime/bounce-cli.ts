/**
 * `lettermill bounce parse FILE...`: the inbound server's parser over stored messages, one
 * JSON line per file and recipient in the shape decisions.md pins. `-` is standard input. An
 * unreadable file is reported on stderr and the others are still parsed; the exit code says so.
 */
import { readFile } from 'node:fs/promises';
import { parseReport } from '../shared/mail/bounce/parse.js';

export interface BounceParseIo {
  out: (line: string) => void;
  err: (line: string) => void;
  stdin: () => Promise<Buffer>;
}

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export const processIo: BounceParseIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  stdin: readStdin,
};

/** Returns the exit code: 0, or 1 when a file could not be read. */
export async function bounceParse(files: string[], io: BounceParseIo = processIo): Promise<number> {
  let code = 0;
  for (const file of files) {
    let raw: Buffer;
    try {
      raw = file === '-' ? await io.stdin() : await readFile(file);
    } catch (err) {
      io.err(`lettermill bounce parse: ${file}: ${(err as NodeJS.ErrnoException).code ?? ''} ${(err as Error).message}`.replace(/\s+/g, ' '));
      code = 1;
      continue;
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
  }
  return code;
}
