/** The streaming CSV reader: RFC 4180 quoting, any chunking gives the same records, and writer round trips. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CsvReader, csvField } from '../../src/shared/csv.js';

const readAll = (text: string, cuts: number[] = []) => {
  const r = new CsvReader();
  const out: string[][] = [];
  let at = 0;
  for (const c of [...cuts].sort((a, b) => a - b)) {
    out.push(...r.push(text.slice(at, c)));
    at = c;
  }
  out.push(...r.push(text.slice(at)), ...r.end());
  return out;
};

describe('CsvReader', () => {
  it('reads quoted fields, escaped quotes, CRLF and LF, blank lines, a last line without a break', () => {
    expect(readAll('a,b\r\n"x, y","He said ""hi"""\n\n"multi\nline",\nlast,row')).toEqual([
      ['a', 'b'],
      ['x, y', 'He said "hi"'],
      ['multi\nline', ''],
      ['last', 'row'],
    ]);
    expect(() => readAll('a\n"open')).toThrow(/unterminated/);
  });

  it('any chunking of the text gives the same records, and written fields read back', () => {
    const field = fc.string({ unit: fc.constantFrom('a', 'b', ',', '"', '\n', '\r', ' ', 'é', '=') , maxLength: 8 });
    fc.assert(
      fc.property(fc.array(fc.array(field, { minLength: 2, maxLength: 4 }), { minLength: 1, maxLength: 6 }), fc.array(fc.nat(), { maxLength: 5 }), (rows, cuts) => {
        const text = rows.map((r) => r.map(csvField).join(',')).join('\r\n');
        const expected = rows.map((r) => r.map((v) => (/^[=+\-@\t\r]/.test(v) ? `'${v}` : v)));
        const whole = readAll(text);
        expect(whole).toEqual(expected);
        expect(readAll(text, cuts.map((c) => c % (text.length + 1)))).toEqual(whole);
      }),
      { numRuns: 300 },
    );
  });
});
