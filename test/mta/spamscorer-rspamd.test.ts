/**
 * The optional spam scorer (SPAMSCORER_URL) against Debian's rspamd, started by the test with a
 * minimal local config: GTUBE scores above SPAMSCORER_REJECT_THRESHOLD and is screened, a clean
 * message passes, and a stopped scorer fails open.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { contentScreening } from '../../src/mta/pipeline/01-content-screening.js';
import { HttpSpamScorer } from '../../src/mta/scorer.js';
import { silentLogger } from '../../src/shared/log.js';
import { GTUBE, rspamdMissing, startRspamd, type Rspamd } from '../harness/rspamd.js';
import { ctxFor, payload, startMta, type TestMta } from './helpers.js';

const missing = rspamdMissing();
if (missing) console.warn(`skipping the rspamd tests: ${missing}`);

describe.skipIf(missing)('spam scorer: a real rspamd', () => {
  let rspamd: Rspamd;
  let t: TestMta;
  beforeAll(async () => {
    rspamd = await startRspamd({ rejectScore: 20 });
    t = await startMta({ env: { SPAMSCORER_URL: rspamd.url } });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await rspamd?.stop();
  });

  it('scores GTUBE above SPAMSCORER_REJECT_THRESHOLD (15) and screens it; a clean message scores low and passes', async () => {
    const scorer = new HttpSpamScorer(rspamd.url, silentLogger);
    const gtube = await scorer.score(payload({ text: `Hello,\n${GTUBE}\n`, html: undefined }));
    expect(gtube).toBe(20);
    expect(gtube!).toBeGreaterThan(t.services.config.SPAMSCORER_REJECT_THRESHOLD);
    const clean = await scorer.score(payload({ text: 'The minutes of Tuesday’s meeting are attached.', html: '<p>The minutes of Tuesday’s meeting are attached.</p>' }));
    expect(clean).not.toBeNull();
    expect(clean!).toBeLessThan(t.services.config.SPAMSCORER_REJECT_THRESHOLD);

    expect(await contentScreening.run(ctxFor(t, { text: GTUBE, html: `<p>${GTUBE}</p>` }))).toEqual({ type: 'drop', status: 'screened', reason: 'spam_score' });
    expect(await contentScreening.run(ctxFor(t, { text: 'Quarterly report', html: '<p>Quarterly report</p>' }))).toEqual({ type: 'continue' });
  });

  it('a stopped scorer fails open: the message passes', async () => {
    await rspamd.stop();
    const scorer = new HttpSpamScorer(rspamd.url, silentLogger);
    expect(await scorer.score(payload({ text: GTUBE }))).toBeNull();
    expect(await contentScreening.run(ctxFor(t, { text: GTUBE, html: `<p>${GTUBE}</p>` }))).toEqual({ type: 'continue' });
  });
});
