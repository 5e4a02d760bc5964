/**
 * Issue #25, finding 3: JSON nested thousands of levels deep overflowed the stack in walks
 * over the parsed body (a RangeError, 500). Parsed bodies now have a depth limit
 * (EDGE_POLICY.maxJsonDepth), checked by an iterative walk before anything else looks.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTimestamped } from '../../src/backend/feedback/verify/hmac.js';
import { EDGE_POLICY } from '../../src/shared/edge-policy.js';
import { findInputFault } from '../../src/shared/input.js';
import { MTA_SECRET, startProduct, type Product } from './helpers.js';

let p: Product;
beforeAll(async () => {
  p = await startProduct();
});
afterAll(async () => p?.close());

const nested = (depth: number, leaf = '1') => '['.repeat(depth) + leaf + ']'.repeat(depth);
const job = (headersJson: string) =>
  `{"messageId":"deep-1","to":"r@example.org","from":"a@sender.example","subject":"s","html":"<p>x</p>","ipPool":"transactional","organizationId":"o","dkimDomain":"sender.example","headers":${headersJson}}`;

describe('finding 3: deep nesting', () => {
  it('POST /send with a body nested 5,000 and 8,000 levels deep is a 400 too_deep, not a RangeError', async () => {
    for (const depth of [5_000, 8_000]) {
      const r = await p.call(p.mta, 'POST', '/send', { auth: 'mta', raw: job(`{"X-A":${nested(depth)}}`) });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.error).toEqual({ category: 'invalid_input', message: `body is nested more than ${EDGE_POLICY.maxJsonDepth} levels deep`, data: { reason: 'too_deep' } });
    }
  });

  it('a __proto__ key below the depth limit is still refused as Fastify refuses it', async () => {
    const r = await p.call(p.mta, 'POST', '/send', { auth: 'mta', raw: job(`{"X-A":[[{"__proto__":1}]]}`) });
    expect(r.status).toBe(400);
    expect(r.body.error.data.reason).toBe('invalid_json');
  });

  it('a signed MTA event nested 4,000 levels deep in data is 400 invalid_payload, not 500', async () => {
    const body = `{"id":"ev-deep-1","event":"ip.delisted","timestamp":"${new Date().toISOString()}","data":{"ip":"127.0.0.2","zone":"z.example","pools":[],"at":"${new Date().toISOString()}","extra":${nested(4_000)}}}`;
    const ts = Math.floor(Date.now() / 1000);
    const r = await p.call(p.backend, 'POST', '/webhooks/mta', { raw: body, headers: { 'x-mta-timestamp': String(ts), 'x-mta-signature': signTimestamped(MTA_SECRET, ts, body) } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.error).toMatchObject({ category: 'invalid_input', data: { reason: 'invalid_payload' } });
    expect(r.body.error.message).toContain(`nested more than ${EDGE_POLICY.maxJsonDepth} levels deep`);
  });

  it('every JSON route has the limit: a deep body is a 400 too_deep before schema validation', async () => {
    const r = await p.call(p.backend, 'POST', '/admin/topics', { raw: `{"name":"t","extra":${nested(100_000)}}`, auth: 'admin' });
    expect(r.status).toBe(400);
    expect(r.body.error.data.reason).toBe('too_deep');
  });

  it('the limit is exactly maxJsonDepth containers; the walk is iterative at any depth', () => {
    const max = EDGE_POLICY.maxJsonDepth;
    expect(findInputFault(JSON.parse(nested(max)), 'body')).toBeNull();
    expect(findInputFault(JSON.parse(nested(max + 1)), 'body')?.reason).toBe('too_deep');
    // No depth limit: the walk still returns (no recursion), here finding the NUL at the bottom.
    expect(findInputFault(JSON.parse(nested(200_000, '"\\u0000"')), 'body', { maxDepth: Infinity })?.reason).toBe('invalid_text');
  });
});
