/**
 * CSV contact import (docs/dashboard.md "CSV import"). The upload is streamed to a spool
 * file (size-limited, records counted on the way, so the progress has a total), answered
 * 202, then read back in the background: parsed as a stream, each address checked with the
 * one address grammar, and written in batches of CONTACT_IMPORT.batchRows with one
 * multi-row `INSERT … ON CONFLICT` each (new contacts are created; existing ones get the
 * names the file gives). Progress and the first rejected rows are kept in contact_imports.
 *
 * Not durable across a restart: an import whose process stopped is marked failed once its
 * progress has not moved for CONTACT_IMPORT.staleAfterMs, by the next start of any instance or
 * by a running instance's periodic check (the operator uploads it again; rows already written
 * stay, and a second run only updates them). Imports other instances are running continue.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { StringDecoder } from 'node:string_decoder';
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { CsvReader } from '../../shared/csv.js';
import type { Db } from '../../shared/db/pool.js';
import { AppError, badInput } from '../../shared/errors.js';
import type { Logger } from '../../shared/log.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import { CONTACT_IMPORT } from './policy.js';

export interface ImportDeps {
  db: Db;
  clock: Clock;
  log: Logger;
}

export interface ImportRow {
  id: string;
  state: 'running' | 'done' | 'failed';
  total: number;
  processed: number;
  imported: number;
  rejected: number;
  errors: { row: number; message: string }[];
  error: string | null;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
}

export const toImport = (r: ImportRow) => ({
  id: r.id,
  state: r.state,
  total: r.total,
  processed: r.processed,
  imported: r.imported,
  rejected: r.rejected,
  errors: r.errors,
  error: r.error,
  createdAt: toIso(r.created_at),
  updatedAt: toIso(r.updated_at),
  finishedAt: r.finished_at ? toIso(r.finished_at) : null,
});

/** Header names accepted for each column (lower-cased, `_`, `-` and spaces removed). */
const COLUMNS: Record<string, 'email' | 'firstName' | 'lastName'> = {
  email: 'email',
  emailaddress: 'email',
  firstname: 'firstName',
  lastname: 'lastName',
};

/** Counts CSV records of a byte stream (line breaks outside quotes) and enforces the size limit. */
class SpoolCounter extends Transform {
  bytes = 0;
  breaks = 0;
  private inQuotes = false;
  private lastByte = 10;
  constructor(private readonly max: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null, data?: Buffer) => void): void {
    this.bytes += chunk.length;
    if (this.bytes > this.max) return done(new AppError('invalid_input', `The file is larger than ${this.max} bytes`, { reason: 'body_too_large' }));
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (b === 34) this.inQuotes = !this.inQuotes;
      else if (b === 10 && !this.inQuotes) this.breaks++;
    }
    this.lastByte = chunk[chunk.length - 1] ?? this.lastByte;
    done(null, chunk);
  }
  /** Records in the file (a last line without a line break counts). */
  get records(): number {
    return this.breaks + (this.lastByte === 10 || this.bytes === 0 ? 0 : 1);
  }
}

export class ContactImporter {
  private readonly running = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly d: ImportDeps) {}

  /** Marks failed the imports whose process is gone (see the file comment), now and periodically. */
  async start(): Promise<void> {
    await this.failStale();
    this.timer = setInterval(() => void this.failStale().catch((err) => this.d.log.warn({ err }, 'stale contact import check failed')), CONTACT_IMPORT.staleAfterMs);
    this.timer.unref();
  }

  /** Returns the ids of the imports marked failed. */
  async failStale(): Promise<string[]> {
    const now = this.d.clock.now();
    const r = await this.d.db.query<{ id: string }>(
      `UPDATE contact_imports SET state = 'failed', error = 'interrupted: the process running it stopped; upload the file again', updated_at = $1, finished_at = $1
        WHERE state = 'running' AND updated_at < $2 RETURNING id`,
      [toIso(now), toIso(now - CONTACT_IMPORT.staleAfterMs)],
    );
    return r.rows.map((x) => x.id);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.allSettled([...this.running]);
  }

  /** Spools the upload, records the import and starts it; returns its id. */
  async accept(body: Readable, createdBy: string | null): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'lm-import-'));
    const file = join(dir, 'upload.csv');
    const counter = new SpoolCounter(CONTACT_IMPORT.maxBytes);
    try {
      await pipeline(body, counter, createWriteStream(file));
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    if (counter.records < 2) {
      await rm(dir, { recursive: true, force: true });
      throw badInput('The CSV needs a header row (with an "email" column) and at least one row', 'empty_import');
    }
    const now = this.d.clock.now();
    const id = newId('imp', now);
    await this.d.db.query(
      `INSERT INTO contact_imports (id, state, total, created_by, created_at, updated_at) VALUES ($1, 'running', $2, $3, $4, $4)`,
      [id, counter.records - 1, createdBy, toIso(now)],
    );
    const run = this.run(id, file)
      .catch(async (err: unknown) => {
        this.d.log.error({ err, importId: id }, 'contact import failed');
        await this.d.db
          .query(`UPDATE contact_imports SET state = 'failed', error = $2, updated_at = $3, finished_at = $3 WHERE id = $1`, [
            id,
            (err instanceof Error ? err.message : String(err)).slice(0, 500),
            toIso(this.d.clock.now()),
          ])
          .catch(() => {});
      })
      .finally(() => {
        this.running.delete(run);
        void rm(dir, { recursive: true, force: true });
      });
    this.running.add(run);
    return id;
  }

  /** Reads the spooled file and writes its contacts batch by batch. */
  async run(id: string, file: string): Promise<void> {
    const reader = new CsvReader();
    const decoder = new StringDecoder('utf8');
    let header: Record<number, 'email' | 'firstName' | 'lastName'> | null = null;
    let emailCol = -1;
    let rowNo = 0; // data rows, 1-based (the header is row 0)
    let batch: { email: string; first: string | null; last: string | null }[] = [];
    const errors: { row: number; message: string }[] = [];
    let rejected = 0;
    let imported = 0;
    let processed = 0;
    const reject = (message: string) => {
      rejected++;
      if (errors.length < CONTACT_IMPORT.maxErrors) errors.push({ row: rowNo, message });
    };
    const flush = async (final: boolean) => {
      if (batch.length > 0) imported += await this.write(batch);
      processed = rowNo;
      batch = [];
      const now = toIso(this.d.clock.now());
      await this.d.db.query(
        `UPDATE contact_imports SET processed = $2, imported = $3, rejected = $4, errors = $5, updated_at = $6,
                state = CASE WHEN $7 THEN 'done' ELSE state END, finished_at = CASE WHEN $7 THEN $6::timestamptz END,
                total = CASE WHEN $7 THEN $2 ELSE total END
          WHERE id = $1`,
        [id, processed, imported, rejected, JSON.stringify(errors), now, final],
      );
    };
    const take = async (records: string[][]) => {
      for (const rec of records) {
        if (!header) {
          header = {};
          rec.forEach((name, i) => {
            const col = COLUMNS[name.replace(/^\uFEFF/, '').toLowerCase().replace(/[\s_-]/g, '')];
            if (col && !Object.values(header!).includes(col)) header![i] = col;
          });
          emailCol = Number(Object.entries(header).find(([, c]) => c === 'email')?.[0] ?? -1);
          if (emailCol < 0) throw badInput('The header row has no "email" column', 'invalid_csv');
          continue;
        }
        rowNo++;
        const raw = rec[emailCol];
        if (raw === undefined || raw.trim() === '') {
          reject('email is missing');
          continue;
        }
        if (rec.some((f) => f.length > CONTACT_IMPORT.maxFieldLength)) {
          reject(`a field is longer than ${CONTACT_IMPORT.maxFieldLength} characters`);
          continue;
        }
        const email = normalizeAddress(raw);
        if (!email) {
          reject(`invalid email address: ${JSON.stringify(raw.slice(0, 100))}`);
          continue;
        }
        let first: string | null = null;
        let last: string | null = null;
        for (const [i, col] of Object.entries(header)) {
          const v = rec[Number(i)]?.trim() || null;
          if (col === 'firstName') first = v;
          else if (col === 'lastName') last = v;
        }
        batch.push({ email, first, last });
        if (batch.length >= CONTACT_IMPORT.batchRows) await flush(false);
      }
    };
    for await (const chunk of createReadStream(file, { highWaterMark: 256 * 1024 })) {
      await take(reader.push(decoder.write(chunk as Buffer)));
    }
    await take(reader.push(decoder.end()));
    await take(reader.end());
    await flush(true);
  }

  /**
   * One batch, one statement: new addresses are created, existing ones (case-insensitively)
   * take the names the file gives when they differ. Within a batch the last row of an address
   * wins (one statement may not touch a row twice). Returns the rows written or matched.
   */
  private async write(rows: { email: string; first: string | null; last: string | null }[]): Promise<number> {
    const byEmail = new Map<string, { email: string; first: string | null; last: string | null }>();
    for (const r of rows) byEmail.set(r.email.toLowerCase(), r);
    const list = [...byEmail.values()];
    const now = this.d.clock.now();
    await this.d.db.query({
      name: 'lm_contact_import_batch',
      text: `INSERT INTO contacts AS c (id, email, first_name, last_name, source, created_at, updated_at)
             SELECT t.id, t.email, t.first, t.last, 'import', $5, $5 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(id, email, first, last)
             ON CONFLICT ((lower(email))) DO UPDATE
               SET first_name = coalesce(EXCLUDED.first_name, c.first_name), last_name = coalesce(EXCLUDED.last_name, c.last_name), updated_at = EXCLUDED.updated_at
             WHERE (c.first_name, c.last_name) IS DISTINCT FROM (coalesce(EXCLUDED.first_name, c.first_name), coalesce(EXCLUDED.last_name, c.last_name))`,
      values: [list.map(() => newId('ct', now)), list.map((r) => r.email), list.map((r) => r.first), list.map((r) => r.last), toIso(now)],
    });
    return rows.length;
  }
}
