/**
 * Content screening's DNS URI blocklist (CONTENT_URIBL) on a real MTA against knotd serving a
 * domain blocklist zone on loopback: a listed link domain (or a parent of the link's host)
 * screens the message, an unlisted one passes, the list refusing us (127.255.255.x, SURBL's
 * 127.0.0.1) and a resolver that does not answer pass it too (fail open, within the timeout),
 * answers are cached for the policy's time, and the lookup is off by default outside production.
 */
import { createSocket, type Socket } from 'node:dgram';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { contentScreening } from '../../../src/mta/pipeline/01-content-screening.js';
import type { MtaJobPayload } from '../../../src/mta/job.js';
import { newContext } from '../../../src/mta/pipeline/index.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { UriBlocklist, uriblEnabled } from '../../../src/mta/reputation/uribl.js';
import { loadConfig } from '../../../src/shared/config.js';
import { silentLogger } from '../../../src/shared/log.js';
import { startDnsServer, type DnsServer } from '../../harness/dns.js';
import { ctxFor, startMta, type TestMta } from '../helpers.js';

let dns: DnsServer;
let t: TestMta;
let off: TestMta;
/** A UDP port that takes queries and never answers: a resolver that is down. */
let silent: Socket;
const policy = { ...DEFAULT_POLICY, uribl: { ...DEFAULT_POLICY.uribl, queryTimeoutMs: 300 } };

beforeAll(async () => {
  dns = await startDnsServer({
    zones: {
      'dbl.test': [
        { name: 'evil.example', type: 'A', value: '127.0.1.2' },
        { name: 'refused.example', type: 'A', value: '127.255.255.254' },
        { name: 'blocked.example', type: 'A', value: '127.0.0.1' },
      ],
    },
  });
  silent = createSocket('udp4');
  await new Promise<void>((r) => silent.bind(0, '127.0.0.1', r));
  t = await startMta({ env: { DNS_SERVERS: dns.servers, CONTENT_URIBL: 'true', CONTENT_URIBL_ZONES: 'dbl.test' }, options: { policy } });
  off = await startMta({ env: { DNS_SERVERS: dns.servers, CONTENT_URIBL_ZONES: 'dbl.test' } });
});
afterAll(async () => {
  await t?.close();
  await off?.close();
  silent?.close();
  await dns?.stop();
});

const run = (over: Partial<MtaJobPayload>, m = t) => contentScreening.run(ctxFor(m, over, { ...m.mta.pipeline, scorer: null }));
const SCREENED = { type: 'drop', status: 'screened', reason: 'blocked_url' };

describe('the DNS URI blocklist of content screening', () => {
  it('screens a message linking to a listed domain, or to a host under it, and passes an unlisted one', async () => {
    expect(await run({ html: '<a href="https://evil.example/offer">x</a>' })).toEqual(SCREENED);
    expect(await run({ html: '<a href="http://WWW.Evil.Example.:8080/">x</a>' })).toEqual(SCREENED);
    expect(await run({ html: '<p>plain</p>', text: 'see https://cdn.evil.example/a' })).toEqual(SCREENED);
    expect(await run({ html: '<a href="https://good.example/">x</a> <a href="https://evil.example.org/">y</a>' })).toEqual({ type: 'continue' });
    // No links, IP literals: nothing to ask.
    expect(await run({ html: '<p>Hello</p>' })).toEqual({ type: 'continue' });
    expect(await run({ html: '<a href="http://127.0.0.9/x">x</a>' })).toEqual({ type: 'continue' });
  });

  it('screens the links in the octets of a raw (submitted) job', async () => {
    const raw = Buffer.from('From: a@sender.example\r\nTo: b@dest.example\r\nSubject: s\r\n\r\nGo to https://shop.evil.example/now\r\n');
    const job = { messageId: 'raw-uribl', to: 'b@dest.example', from: 'a@sender.example', raw: raw.toString('base64'), ipPool: 'transactional', organizationId: 'org-1', dkimDomain: 'sender.example', engagementScore: null, band: 'default', acceptedAt: 0, recipient: 'b@dest.example', domain: 'dest.example' } as unknown as MtaJobPayload;
    expect(await contentScreening.run(newContext({ ...t.mta.pipeline, scorer: null }, 'job-raw-uribl', job))).toEqual(SCREENED);
  });

  it('passes a link when the list refuses our resolver (127.255.255.x, SURBL/URIBL 127.0.0.1): that is no listing', async () => {
    expect(await run({ html: '<a href="https://refused.example/">x</a>' })).toEqual({ type: 'continue' });
    expect(await run({ html: '<a href="https://blocked.example/">x</a>' })).toEqual({ type: 'continue' });
  });

  it('passes the message when the resolver does not answer, within the policy timeout', async () => {
    const port = (silent.address() as { port: number }).port;
    const down = new UriBlocklist({ zones: ['dbl.test'], servers: [`127.0.0.1:${port}`], clock: t.clock, policy: policy.uribl, log: silentLogger });
    const deps = { ...t.mta.pipeline, scorer: null, uriBlocklist: down };
    const started = Date.now();
    expect(await contentScreening.run(ctxFor(t, { html: '<a href="https://evil.example/">x</a>' }, deps))).toEqual({ type: 'continue' });
    expect(Date.now() - started).toBeLessThan(policy.uribl.queryTimeoutMs * 4);
    // A zone the server does not serve (REFUSED) passes too.
    const unserved = new UriBlocklist({ zones: ['unserved.test'], servers: [dns.servers], clock: t.clock, policy: policy.uribl, log: silentLogger });
    expect(await unserved.listed(['evil.example'])).toBeNull();
  });

  it('keeps an answer for cacheTtlMs: a domain listed meanwhile screens only once it expires', async () => {
    expect(await run({ html: '<a href="https://later.example/">x</a>' })).toEqual({ type: 'continue' });
    await dns.setRecords('dbl.test', [...dns.getRecords('dbl.test')!, { name: 'later.example', type: 'A', value: '127.0.1.2' }]);
    expect(await run({ html: '<a href="https://later.example/">x</a>' })).toEqual({ type: 'continue' });
    t.clock.advance(policy.uribl.cacheTtlMs + 1);
    expect(await run({ html: '<a href="https://later.example/">x</a>' })).toEqual(SCREENED);
  });

  it('is off by default outside production and on in production, with documented default zones', async () => {
    expect(off.mta.pipeline.uriBlocklist).toBeNull();
    expect(await run({ html: '<a href="https://evil.example/">x</a>' }, off)).toEqual({ type: 'continue' });
    expect(uriblEnabled({ CONTENT_URIBL: undefined, NODE_ENV: 'production' })).toBe(true);
    expect(uriblEnabled({ CONTENT_URIBL: undefined, NODE_ENV: 'test' })).toBe(false);
    expect(uriblEnabled({ CONTENT_URIBL: false, NODE_ENV: 'production' })).toBe(false);
    expect(loadConfig({}).CONTENT_URIBL_ZONES).toEqual(['dbl.spamhaus.org', 'multi.surbl.org']);
  });
});
