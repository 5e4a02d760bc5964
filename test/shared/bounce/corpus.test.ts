/**
 * The scored corpus (test/fixtures/bounces/corpus, written from vendors' and MTAs' documented
 * formats by build.ts): every recipient of every report gets a row, with the manifest's reason,
 * hard/soft, status, complaint feedback type and, for delay warnings, action `delayed`.
 * `npm run bench:bounce-agreement` prints the same comparison as figures.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseReport } from '../../../src/shared/mail/bounce/parse.js';
import { CORPUS_DIR, manifest, score } from '../../fixtures/bounces/corpus/score.js';

describe('the scored bounce corpus', () => {
  for (const [file, { source, expect: rows }] of Object.entries(manifest())) {
    it(`${file}: ${source}`, async () => {
      const r = await parseReport(readFileSync(join(CORPUS_DIR, file)));
      const got = rows.map((want) => {
        const x = r.recipients.find((g) => g.recipient === want.recipient);
        return {
          recipient: x?.recipient ?? null,
          reason: x?.reason,
          hardBounce: x?.hardBounce,
          status: x?.status,
          ...(want.feedbackType !== undefined ? { feedbackType: r.feedbackType } : {}),
          ...(want.action ? { action: x?.action } : {}),
        };
      });
      expect(got).toEqual(rows.map(({ action, ...w }) => ({ ...w, ...(action ? { action } : {}) })));
      // No row beyond the manifest's: a report never invents recipients.
      expect(r.recipients.map((x) => x.recipient).sort()).toEqual(rows.map((w) => w.recipient).sort());
    });
  }

  it('agrees on every field for every recipient (the figures of bench:bounce-agreement)', async () => {
    const s = await score();
    expect(s.misses).toEqual([]);
    expect(s.recipients).toBeGreaterThanOrEqual(70);
  });
});
