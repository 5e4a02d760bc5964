/**
 * `npm run bench:bounce-agreement`: how far parseReport agrees with the expected verdicts of the
 * scored corpus (test/fixtures/bounces/corpus, written from vendors' documented formats), per
 * field, and every disagreement. No timing: this is the accuracy half of issue 43.
 */
import { score, summary } from '../test/fixtures/bounces/corpus/score.js';

const s = await score();
for (const line of summary(s)) console.log(line);
for (const m of s.misses) console.log(`  ${m.file} ${m.recipient} ${m.field}: want ${JSON.stringify(m.want)}, got ${JSON.stringify(m.got)}`);
