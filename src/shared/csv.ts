/**
 * A streaming CSV reader (RFC 4180: comma separator, `"` quoting with `""` escapes, CRLF or
 * LF line ends) and the field writer. Feed text chunks; complete records come out as they end.
 */
export class CsvReader {
  private field = '';
  private record: string[] = [];
  private inQuotes = false;
  /** A `"` seen inside quotes: either an escaped quote or the closing one (next char decides). */
  private quoteSeen = false;
  /** The previous chunk ended with CR (a CRLF split across chunks). */
  private cr = false;
  /** Any character of the current record seen (so a blank line is no record). */
  private started = false;

  push(chunk: string): string[][] {
    const out: string[][] = [];
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.inQuotes) {
        if (this.quoteSeen) {
          this.quoteSeen = false;
          if (chunk.charCodeAt(i) === 34) {
            this.field += '"';
            i++;
            continue;
          }
          this.inQuotes = false;
          continue; // closing quote: read this character unquoted
        }
        const q = chunk.indexOf('"', i);
        if (q < 0) {
          this.field += chunk.slice(i);
          return out;
        }
        this.field += chunk.slice(i, q);
        this.quoteSeen = true;
        i = q + 1;
        continue;
      }
      const c = chunk.charCodeAt(i);
      if (this.cr) {
        this.cr = false;
        if (c === 10) {
          i++;
          continue;
        }
      }
      if (c === 44) {
        this.record.push(this.field);
        this.field = '';
        this.started = true;
        i++;
      } else if (c === 10 || c === 13) {
        if (this.started || this.field !== '') {
          this.record.push(this.field);
          out.push(this.record);
        }
        this.record = [];
        this.field = '';
        this.started = false;
        this.cr = c === 13;
        i++;
      } else if (c === 34 && this.field === '') {
        this.inQuotes = true;
        this.started = true;
        i++;
      } else {
        // A run of plain characters at once.
        let j = i + 1;
        while (j < n) {
          const d = chunk.charCodeAt(j);
          if (d === 44 || d === 10 || d === 13) break;
          j++;
        }
        this.field += chunk.slice(i, j);
        this.started = true;
        i = j;
      }
    }
    return out;
  }

  /** The last record when the text does not end with a line break. */
  end(): string[][] {
    if (this.quoteSeen) {
      this.quoteSeen = false;
      this.inQuotes = false;
    }
    if (this.inQuotes) throw new Error('unterminated quoted field at the end of the file');
    if (!this.started && this.field === '') return [];
    this.record.push(this.field);
    const r = this.record;
    this.record = [];
    this.field = '';
    this.started = false;
    return [r];
  }
}

const SPECIAL = /[",\r\n]/;
/** One CSV field; a leading =, +, - or @ gets a `'` so spreadsheets do not evaluate it (CSV injection). */
export function csvField(v: string | null | undefined): string {
  if (v === null || v === undefined) return '';
  const safe = /^[=+\-@\t\r]/.test(v) ? `'${v}` : v;
  return SPECIAL.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}
