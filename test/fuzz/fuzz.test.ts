/**
 * CI's slice of the fuzz run: every target of test/fuzz/targets.ts with the run's fixed seed
 * and a few hundred inputs each (`npm run fuzz` runs 1,000,000+). A failure prints the
 * shrunk counterexample and the seed/path that replays it.
 */
import fc from 'fast-check';
import { describe, it } from 'vitest';
import { FUZZ_SEED, TARGETS } from './targets.js';

describe('fuzz slice (fixed seed)', () => {
  for (const t of TARGETS) {
    it(t.name, () => {
      fc.assert(t.property, { seed: FUZZ_SEED, numRuns: Math.min(300, t.runs) });
    });
  }
});
