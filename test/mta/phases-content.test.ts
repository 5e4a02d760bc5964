/** Phases 1 (content_screening) and 2 (suppression), each outcome. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { contentScreening } from '../../src/mta/pipeline/01-content-screening.js';
import { suppression } from '../../src/mta/pipeline/02-suppression.js';
import type { PipelineDeps } from '../../src/mta/pipeline/index.js';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { ctxFor, startMta, type TestMta } from './helpers.js';

let t: TestMta;
let scorer: HttpReceiver;
let plain: PipelineDeps;

beforeAll(async () => {
  scorer = await startHttpReceiver();
  t = await startMta({ env: { SPAMSCORER_URL: `${scorer.url}/checkv2`, SPAMSCORER_REJECT_THRESHOLD: '15', CONTENT_MAX_SIZE_KB: '1' } });
  plain = { ...t.mta.pipeline, scorer: null, settings: { ...t.mta.pipeline.settings, urlBlocklist: new Set(['bad.example']) } };
});
afterAll(async () => {
  await t?.close();
  await scorer?.close();
});
beforeEach(() => scorer.reset());

describe('content_screening', () => {
  const run = (over: Parameters<typeof ctxFor>[1], deps = plain) => contentScreening.run(ctxFor(t, over, deps));

  it('continues for clean content', async () => {
    expect(await run({})).toEqual({ type: 'continue' });
  });

  it('drops when the DKIM domain is not the From domain', async () => {
    expect(await run({ dkimDomain: 'other.example' })).toEqual({ type: 'drop', status: 'screened', reason: 'dkim_domain_mismatch' });
    // Case does not matter; a display name does not confuse it.
    expect(await run({ from: 'Shop <Sales@Sender.Example>', dkimDomain: 'sender.example' })).toEqual({ type: 'continue' });
    // An internationalized From domain matches its A-label form (what /send stores as dkimDomain).
    expect(await run({ from: 'Shop <sales@Bücher.example>', dkimDomain: 'xn--bcher-kva.example' })).toEqual({ type: 'continue' });
  });

  it('drops HTML above CONTENT_MAX_SIZE_KB and keeps HTML at the limit', async () => {
    expect(await run({ html: 'x'.repeat(1024) })).toEqual({ type: 'continue' });
    expect(await run({ html: 'x'.repeat(1025) })).toMatchObject({ type: 'drop', status: 'screened', reason: 'html_too_large' });
  });

  it('drops when html and text are both empty; either alone is a body', async () => {
    expect(await run({ html: '', text: undefined })).toMatchObject({ type: 'drop', reason: 'empty_body' });
    expect(await run({ html: '  ', text: '' })).toMatchObject({ type: 'drop', reason: 'empty_body' });
    expect(await run({ html: '', text: 'plain words' })).toEqual({ type: 'continue' });
  });

  it('drops a missing From or Subject', async () => {
    expect(await run({ subject: '   ' })).toMatchObject({ type: 'drop', reason: 'missing_subject' });
    expect(await run({ from: '' })).toMatchObject({ type: 'drop', reason: 'missing_from' });
  });

  it('drops links to a blocklisted domain or its subdomains, in html or text', async () => {
    expect(await run({ html: '<a href="https://bad.example/x">x</a>' })).toMatchObject({ type: 'drop', reason: 'blocked_url' });
    expect(await run({ html: '<a href="http://WWW.Bad.Example:8080/">x</a>' })).toMatchObject({ type: 'drop', reason: 'blocked_url' });
    expect(await run({ text: 'see https://cdn.bad.example/a' })).toMatchObject({ type: 'drop', reason: 'blocked_url' });
    expect(await run({ html: '<a href="https://notbad.example/">x</a> bad.example' })).toEqual({ type: 'continue' });
  });

  it('asks the scorer and drops above SPAMSCORER_REJECT_THRESHOLD', async () => {
    scorer.setResponder(() => ({ status: 200, body: { score: 15.5, required_score: 15, action: 'reject' } }));
    expect(await run({}, t.mta.pipeline)).toMatchObject({ type: 'drop', status: 'screened', reason: 'spam_score' });
    const [req] = await scorer.waitFor(1);
    expect(req!.url).toBe('/checkv2');
    expect(req!.headers['content-type']).toBe('message/rfc822');
    expect(req!.rawBody.toString()).toContain('Subject: Hello');
  });

  it('passes at the threshold and below', async () => {
    scorer.setResponder(() => ({ status: 200, body: { score: 15 } }));
    expect(await run({}, t.mta.pipeline)).toEqual({ type: 'continue' });
  });

  it('fails open when the scorer errors or answers nonsense', async () => {
    scorer.setResponder(() => 500);
    expect(await run({}, t.mta.pipeline)).toEqual({ type: 'continue' });
    scorer.setResponder(() => ({ status: 200, body: { verdict: 'spam' } }));
    expect(await run({}, t.mta.pipeline)).toEqual({ type: 'continue' });
  });

  it('does not call the scorer for content already screened out', async () => {
    scorer.setResponder(() => ({ status: 200, body: { score: 0 } }));
    expect(await run({ dkimDomain: 'x.example' }, t.mta.pipeline)).toMatchObject({ type: 'drop', reason: 'dkim_domain_mismatch' });
    expect(scorer.requests).toHaveLength(0);
  });

  it('is skipped entirely when CONTENT_SCREENING_ENABLED is false', async () => {
    const off = { ...plain, settings: { ...plain.settings, contentScreeningEnabled: false } };
    expect(await run({ dkimDomain: 'x.example', html: '', subject: '' }, off)).toEqual({ type: 'continue' });
  });
});

describe('suppression', () => {
  it('drops a suppressed recipient silently, matching case-insensitively', async () => {
    const r = await t.call('POST', '/suppression', { addresses: ['Blocked.Person@Example.ORG'], reason: 'manual' });
    expect(r.status).toBe(200);
    expect(await suppression.run(ctxFor(t, { to: 'BLOCKED.person@example.org' }))).toEqual({ type: 'drop', status: 'suppressed', reason: 'suppressed' });
  });

  it('continues for any other recipient, and again once the address is removed', async () => {
    expect(await suppression.run(ctxFor(t, { to: 'fine@example.org' }))).toEqual({ type: 'continue' });
    await t.call('POST', '/suppression', { addresses: ['temp@example.org'], reason: 'complaint' });
    expect((await suppression.run(ctxFor(t, { to: 'temp@example.org' }))).type).toBe('drop');
    expect((await t.call('DELETE', '/suppression/temp@example.org')).status).toBe(200);
    expect(await suppression.run(ctxFor(t, { to: 'temp@example.org' }))).toEqual({ type: 'continue' });
  });
});
