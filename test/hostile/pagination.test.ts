/**
 * Issue #43, item 7: every list route of both servers, each of its numeric and cursor query
 * parameters given hostile values (huge, negative, fractional, non-numeric, just past
 * PostgreSQL's int and bigint), answers 400 invalid_input in the envelope: never a 5xx.
 * The routes come from the servers' own route tables, so a new list route is probed too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCOPES } from '../../src/backend/api/keys.js';
import { routesOf, type RouteEntry } from '../../src/shared/http.js';
import { startProduct, type Product } from './helpers.js';

let p: Product;
let apiKey: string;
beforeAll(async () => {
  p = await startProduct({ WEBHOOK_ALLOW_HOSTS: '127.0.0.1' });
  apiKey = (await p.call(p.backend, 'POST', '/admin/api-keys', { auth: 'admin', body: { scopes: [...SCOPES] } })).body.data.key;
  // The routes under an id need one that exists, so the paging values are what is judged.
  const made = async (path: string, body: unknown, auth = 'admin') => {
    const r = await p.call(p.backend, 'POST', path, { auth, body });
    expect(r.status, `${path} ${JSON.stringify(r.body)}`).toBe(201);
    return r.body.data.id as string;
  };
  const topicId = await made('/admin/topics', { name: 'Paging' });
  ids.campaigns = await made('/admin/campaigns', { subject: 'Paging', html: '<p>x</p>', from: 'News <news@acme.test>', topicId });
  ids.mailboxes = await made('/admin/mailboxes', { address: 'paging@acme.test' });
  ids.webhooks = await made('/admin/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['email.sent'] });
  ids.contacts = await made('/api/v1/contacts', { email: 'paging@example.com' }, apiKey);
});
const ids: Record<string, string> = {};
afterAll(async () => p?.close());

const PAGING = /^(limit|offset|cursor|page|pageSize|before|after)$/;
/** Refused with a 400 on every numeric paging parameter. */
const NUMBERS = ['99999999999999999999999999', '-1', '1.5', 'abc', '', '9223372036854775808', '9007199254740992', '-9223372036854775809', '1e400'];
/** Within range of a bigint (a 400 where the route sets a maximum, else an empty page): never a 5xx. */
const LARGE = ['2147483648', '9007199254740991'];
const CURSORS = ['9999999999999999999', '-1', '%00', 'x'.repeat(5000), '!!!', 'eyJpZCI6MX0', 'MTIzNDU2Nzg5MDEyMzQ1Njc4OTA'];

interface Probe {
  server: 'backend' | 'mta';
  route: RouteEntry;
  param: string;
  numeric: boolean;
}

function probes(): Probe[] {
  const out: Probe[] = [];
  for (const [server, app] of [['backend', p.app.backend!.app], ['mta', p.app.mta!.app]] as const) {
    for (const route of routesOf(app)) {
      if (route.method !== 'GET') continue;
      for (const [param, schema] of Object.entries(route.querystring?.properties ?? {})) {
        if (!PAGING.test(param)) continue;
        const t = (schema as { type?: unknown; anyOf?: { type?: unknown }[] });
        const numeric = t.type === 'integer' || t.type === 'number' || !!t.anyOf?.some((a) => a.type === 'integer' || a.type === 'number');
        out.push({ server, route, param, numeric });
      }
    }
  }
  return out;
}

/** `/admin/<area>/:id/...` with the id made for that area. */
const fill = (url: string) => url.replace(/\/([a-z]+)\/:id/, (_m, area: string) => `/${area}/${ids[area] ?? 'none'}`);

describe('issue 43 item 7: hostile paging values on every list route of both servers', () => {
  it('there are list routes to probe on both servers (the table is read, not empty)', () => {
    const all = probes();
    expect(all.filter((x) => x.server === 'mta').map((x) => `${x.route.url}?${x.param}`)).toEqual(expect.arrayContaining(['/dlq?offset', '/queue/pending?offset', '/delivery-logs?cursor']));
    expect(all.filter((x) => x.server === 'backend').map((x) => `${x.route.url}?${x.param}`)).toEqual(expect.arrayContaining(['/api/v1/contacts?limit', '/api/v1/contacts?cursor']));
  });

  it('huge, negative, fractional, non-numeric and out-of-range values: 4xx in the envelope, never 5xx', async () => {
    const failures: string[] = [];
    for (const x of probes()) {
      const base = x.server === 'mta' ? p.mta : p.backend;
      const auth = x.server === 'mta' ? 'mta' : x.route.url.startsWith('/api/') ? apiKey : 'admin';
      for (const v of x.numeric ? [...NUMBERS, ...LARGE] : CURSORS) {
        const path = `${fill(x.route.url)}?${x.param}=${v.startsWith('%') ? v : encodeURIComponent(v)}`;
        const r = await p.call(base, 'GET', path, { auth });
        if (r.status === 404 && r.body?.error?.category === 'not_found') failures.push(`the route's record is missing, nothing was probed: ${path}`);
        const what = `${x.server} GET ${path.slice(0, 120)} → ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
        if (r.status >= 500) failures.push(what);
        else if (r.status >= 400 && (r.body?.error?.category === undefined || typeof r.body.error.message !== 'string')) failures.push(`not the envelope: ${what}`);
        else if (NUMBERS.includes(v) && x.numeric && (r.status !== 400 || r.body.error.category !== 'invalid_input')) failures.push(`not refused: ${what}`);
      }
    }
    expect(failures).toEqual([]);
  }, 120_000);
});
