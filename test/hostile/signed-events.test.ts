/**
 * Issue #43, item 7: validly signed events whose fields hold hostile values, on the doors the
 * MTA (and a relay) post to: /webhooks/mta, /webhooks/mta-mailbox, /webhooks/relay. Each
 * answers 4xx in the envelope, or 200 where the contract acknowledges what it does not know,
 * never a 500; a refused body writes nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTimestamped } from '../../src/backend/feedback/verify/hmac.js';
import { MTA_SECRET, startProduct, type Product } from './helpers.js';

const RELAY_SECRET = 'relay-webhook-secret-hostile-0123456789';
let p: Product;
let mailboxId: string;
beforeAll(async () => {
  p = await startProduct({ RELAY_WEBHOOK_SECRET: RELAY_SECRET });
  mailboxId = (await p.call(p.backend, 'POST', '/admin/mailboxes', { auth: 'admin', body: { address: 'hostile@acme.test' } })).body.data.id;
});
afterAll(async () => p?.close());

const scheme = { mta: ['x-mta-timestamp', 'x-mta-signature', MTA_SECRET], relay: ['x-relay-timestamp', 'x-relay-signature', RELAY_SECRET] } as const;

async function post(path: string, kind: keyof typeof scheme, body: unknown) {
  const raw = typeof body === 'string' ? body : JSON.stringify(body);
  const ts = Math.floor(Date.now() / 1000);
  const [tsHeader, sigHeader, secret] = scheme[kind];
  return p.call(p.backend, 'POST', path, { raw, headers: { [tsHeader]: String(ts), [sigHeader]: signTimestamped(secret, ts, raw) } });
}

/** Rows in every table of the backend's database (one query): a refused event leaves them as they were. */
let countAll: string | undefined;
async function rowCounts(): Promise<Record<string, number>> {
  const db = p.app.db.pool;
  if (!countAll) {
    const tables = await db.query<{ t: string }>(`SELECT format('%I', tablename) AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`);
    countAll = `SELECT ${tables.rows.map(({ t }) => `(SELECT count(*)::int FROM ${t}) AS ${t}`).join(', ')}`;
  }
  return (await db.query(countAll)).rows[0];
}

const BAD_DATES = ['not a date', '99999999999999999999', '-100000-01-01T00:00:00Z', '+275760-09-13T00:00:00.000Z', '0000-00-00T00:00:00Z', '2026-13-45T99:99:99Z'];
const HUGE = 'h'.repeat(300_000);
const WEIRD = [null, true, 12, -1, 1e308, 1e20, [], {}, { nested: { deeper: [1, { x: 'y' }] } }, '', 'a\u0000b', HUGE, 'not-an-email', '\ud800'];

const sent = (over: Record<string, unknown> = {}, data: Record<string, unknown> = {}) => ({
  id: `ev-${Math.random().toString(36).slice(2)}`,
  event: 'sent',
  timestamp: new Date().toISOString(),
  data: { messageId: 'msg-nope', organizationId: 'default', campaignId: null, recipient: 'reader@example.com', jobId: 'job-1', domain: 'example.com', pool: null, ip: '127.0.0.1', mxHost: null, smtpCode: 250, smtpResponse: '250 ok', tls: false, attempt: 1, ...data },
  ...over,
});
const relay = (over: Record<string, unknown> = {}) => ({ id: `rl-${Math.random().toString(36).slice(2)}`, event: 'delivered', timestamp: new Date().toISOString(), messageId: 'm-1', recipient: 'reader@example.com', ...over });
const delivery = (over: Record<string, unknown> = {}) => ({
  id: `dl-${Math.random().toString(36).slice(2)}`,
  mailboxId,
  organizationId: 'default',
  address: 'hostile@acme.test',
  envelopeFrom: 'someone@example.com',
  receivedAt: new Date().toISOString(),
  authentication: { header: 'x; spf=none', spf: 'none', dkim: 'none', dmarc: 'none' },
  rawSize: 20,
  raw: Buffer.from('Subject: hi\r\n\r\nhello\r\n').toString('base64'),
  ...over,
});

function cases(): [string, string, keyof typeof scheme, unknown][] {
  const out: [string, string, keyof typeof scheme, unknown][] = [];
  for (const v of WEIRD) {
    for (const field of ['id', 'event', 'timestamp', 'data']) out.push([`mta ${field}=${String(v).slice(0, 20)}`, '/webhooks/mta', 'mta', sent({ [field]: v })]);
    for (const field of ['recipient', 'messageId', 'smtpCode', 'attempt', 'organizationId', 'smtpResponse', 'tls']) out.push([`mta data.${field}=${String(v).slice(0, 20)}`, '/webhooks/mta', 'mta', sent({}, { [field]: v })]);
    for (const field of ['id', 'event', 'timestamp', 'recipient', 'messageId', 'metadata', 'bounce', 'suppression']) {
      out.push([`relay ${field}=${String(v).slice(0, 20)}`, '/webhooks/relay', 'relay', relay({ [field]: v })]);
      out.push([`relay bounced ${field}=${String(v).slice(0, 20)}`, '/webhooks/relay', 'relay', relay({ event: 'bounced', [field]: v })]);
    }
    for (const field of ['id', 'mailboxId', 'address', 'envelopeFrom', 'receivedAt', 'rawSize', 'raw', 'authentication']) out.push([`mailbox ${field}=${String(v).slice(0, 20)}`, '/webhooks/mta-mailbox', 'mta', delivery({ [field]: v })]);
  }
  for (const d of BAD_DATES) {
    out.push([`mta timestamp ${d}`, '/webhooks/mta', 'mta', sent({ timestamp: d })]);
    out.push([`relay timestamp ${d}`, '/webhooks/relay', 'relay', relay({ timestamp: d })]);
    out.push([`mailbox receivedAt ${d}`, '/webhooks/mta-mailbox', 'mta', delivery({ receivedAt: d })]);
    out.push([`mta inbound receivedAt ${d}`, '/webhooks/mta', 'mta', { id: `in-${d}`, event: 'inbound.received', timestamp: new Date().toISOString(), data: { messageId: null, from: 'a@example.com', to: ['x@acme.test'], subject: 's', text: 't', html: null, inReplyTo: null, references: [], receivedAt: d } }]);
    out.push([`mta breaker openedAt ${d}`, '/webhooks/mta', 'mta', { id: `cb-${d}`, event: 'org.circuit_breaker', timestamp: d, data: { organizationId: 'default', severity: 'critical', state: 'open', window: null, signal: null, rate: null, threshold: null, sample: null, cooldownMs: 1, openedAt: d } }]);
  }
  for (const n of [-1, 1e308, 1e20, 2 ** 53, 2 ** 63]) {
    out.push([`relay timestamp ${n}`, '/webhooks/relay', 'relay', relay({ timestamp: n })]);
    out.push([`mailbox rawSize ${n}`, '/webhooks/mta-mailbox', 'mta', delivery({ rawSize: n })]);
    out.push([`mta breaker cooldownMs ${n}`, '/webhooks/mta', 'mta', { id: `cbn-${n}`, event: 'org.circuit_breaker', timestamp: new Date().toISOString(), data: { organizationId: 'default', severity: 'critical', state: 'open', window: null, signal: null, rate: n, threshold: n, sample: n, cooldownMs: n, openedAt: new Date().toISOString() } }]);
  }
  const inbound = (data: Record<string, unknown>) => ({ id: `inb-${Math.random()}`, event: 'inbound.received', timestamp: new Date().toISOString(), data: { messageId: null, from: 'a@example.com', to: ['x@acme.test'], subject: 's', text: 't', html: null, inReplyTo: null, references: [], receivedAt: new Date().toISOString(), ...data } });
  out.push(['mta inbound rawSize 1e20', '/webhooks/mta', 'mta', inbound({ rawSize: 1e20 })]);
  out.push(['mta inbound attachment size 1e20', '/webhooks/mta', 'mta', inbound({ attachments: [{ filename: 'a', contentType: 'text/plain', size: 1e20 }] })]);
  out.push(['mta inbound to not addresses', '/webhooks/mta', 'mta', inbound({ to: ['nope', 'also nope'] })]);
  out.push(['mta inbound raw not base64', '/webhooks/mta', 'mta', inbound({ raw: '!!!' })]);
  out.push(['mailbox NUL in the Subject of raw', '/webhooks/mta-mailbox', 'mta', delivery({ raw: Buffer.from('Subject: a\0b\r\nFrom: x\0y@example.com\r\n\r\nhi\r\n').toString('base64') })]);
  out.push(['mta unknown event', '/webhooks/mta', 'mta', sent({ event: 'x.from.the.future' })]);
  out.push(['mta mailbox that does not exist', '/webhooks/mta-mailbox', 'mta', delivery({ mailboxId: 'mbx_nope' })]);
  out.push(['mta array of hostile', '/webhooks/mta', 'mta', [sent(), sent({}, { recipient: 'a\u0000b@example.com' })]]);
  out.push(['relay array with one bad', '/webhooks/relay', 'relay', [relay(), relay({ recipient: 'nope' })]]);
  out.push(['relay 101 events', '/webhooks/relay', 'relay', Array.from({ length: 101 }, () => relay())]);
  out.push(['mta deep nesting', '/webhooks/mta', 'mta', sent({}, { extra: JSON.parse('['.repeat(200) + ']'.repeat(200)) })]);
  out.push(['mta not JSON', '/webhooks/mta', 'mta', '{"id":']);
  out.push(['relay scalar', '/webhooks/relay', 'relay', '42']);
  out.push(['mailbox not base64', '/webhooks/mta-mailbox', 'mta', delivery({ raw: '***' })]);
  return out;
}

describe('issue 43 item 7: signed events with hostile field values', () => {
  it('answer 4xx in the envelope (or 200 acknowledged), never 5xx; a refusal writes nothing', async () => {
    const failures: string[] = [];
    for (const [what, path, kind, body] of cases()) {
      const before = await rowCounts();
      const r = await post(path, kind, body);
      const line = `${what} → ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`;
      if (r.status >= 500) failures.push(line);
      else if (r.status >= 400) {
        if (typeof r.body?.error?.message !== 'string' || typeof r.body.error.category !== 'string') failures.push(`not the envelope: ${line}`);
        const after = await rowCounts();
        const changed = Object.keys(after).filter((t) => after[t] !== before[t]);
        if (changed.length) failures.push(`refused but wrote ${changed.join(', ')}: ${line}`);
      }
    }
    expect(failures).toEqual([]);
  }, 300_000);
});
