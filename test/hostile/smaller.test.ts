/** Issue #25, finding 9: the smaller ones, each against the running product. */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signTimestamped } from '../../src/backend/feedback/verify/hmac.js';
import { LinkSigner } from '../../src/backend/public/tracked-links.js';
import { DkimKeyCache } from '../../src/mta/delivery/dkim/keys.js';
import { PgDkimKeyStore } from '../../src/mta/stores/dkim.js';
import { ManualClock } from '../../src/shared/clock.js';
import { decodePayload } from '../../src/shared/queue/payload-codec.js';
import { loadSigner } from '../../src/shared/signing.js';
import { envelopeOf, MTA_SECRET, rawRequest, startProduct, type Product } from './helpers.js';

let p: Product;
let key: string;
beforeAll(async () => {
  p = await startProduct();
  const r = await p.call(p.backend, 'POST', '/admin/api-keys', { auth: 'admin', body: { scopes: ['contacts:read', 'transactional:send'] } });
  key = r.body.data.key;
});
afterAll(async () => p?.close());

const rsaPem = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

/** Another spelling of the same bytes: the last character of a 16-byte base64url value carries 2 unused bits. */
function respell(b64: string): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const last = alphabet.indexOf(b64.at(-1)!);
  return b64.slice(0, -1) + alphabet[last ^ 1];
}

describe('finding 9', () => {
  it('a repeated X-MTA-Signature counts as missing (401 missing_signature), as documented', async () => {
    const body = JSON.stringify({ id: 'ev-rep-1', event: 'x.unknown', timestamp: new Date().toISOString(), data: {} });
    const ts = Math.floor(Date.now() / 1000);
    const sig = signTimestamped(MTA_SECRET, ts, body);
    const r = await rawRequest(
      p.backend,
      `POST /webhooks/mta HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-MTA-Timestamp: ${ts}\r\nX-MTA-Signature: ${sig}\r\nX-MTA-Signature: ${sig}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    expect(r.status).toBe(401);
    expect(envelopeOf(r).error.data.reason).toBe('missing_signature');
  });

  it('numbers in a query are decimals: limit=0x10, 1e1 and " 5" are a 400, limit=16 is 16', async () => {
    for (const v of ['0x10', '1e1', '%205', '+5', '0b1']) {
      const r = await p.call(p.backend, 'GET', `/api/v1/contacts?limit=${v}`, { auth: key });
      expect(r.status, v).toBe(400);
      expect(r.body.error.message, v).toBe('Invalid querystring.limit: must be a decimal number');
    }
    const ok = await p.call(p.backend, 'GET', '/api/v1/contacts?limit=16', { auth: key });
    expect(ok.status).toBe(200);
    const mta = await p.call(p.mta, 'GET', '/queue/pending?limit=0x10', { auth: 'mta' });
    expect(mta.status).toBe(400);
  });

  it('POST /dkim refuses an IP address as the domain', async () => {
    for (const domain of ['192.0.2.1', '10.0.0.1']) {
      const r = await p.call(p.mta, 'POST', '/dkim', { auth: 'mta', body: { domain, selector: 's1', privateKey: rsaPem } });
      expect(r.status, domain).toBe(400);
      expect(r.body.error.data.reason).toBe('invalid_domain');
    }
    expect((await p.call(p.mta, 'POST', '/dkim', { auth: 'mta', body: { domain: 'mail2.example', selector: 's1', privateKey: rsaPem } })).status).toBe(201);
  });

  it('a domain without a DKIM key is remembered for seconds, not 5 minutes: a key added meanwhile is found on the next attempt', async () => {
    const clock = new ManualClock(Date.now());
    const cache = new DkimKeyCache(new PgDkimKeyStore(p.app.db.pool, clock), clock);
    expect(await cache.get('late.example')).toEqual([]);
    expect((await p.call(p.mta, 'POST', '/dkim', { auth: 'mta', body: { domain: 'late.example', selector: 's1', privateKey: rsaPem } })).status).toBe(201);
    clock.advance(6_000);
    expect((await cache.get('late.example')).map((k) => k.selector)).toEqual(['s1']);
  });

  it('signed tokens and click links have one spelling: another base64url spelling of the same bytes is refused', async () => {
    const signer = await loadSigner(p.app.db.pool);
    const token = signer.sign('unsubscribe', { c: 'ct_1' });
    const [body, mac] = token.split('.') as [string, string];
    expect(signer.verify('unsubscribe', token, Date.now()).ok).toBe(true);
    const other = `${body}.${respell(mac)}`;
    expect(Buffer.from(respell(mac), 'base64url').equals(Buffer.from(mac, 'base64url'))).toBe(true);
    expect(signer.verify('unsubscribe', other, Date.now())).toEqual({ ok: false, reason: 'malformed' });
    expect(signer.verify('unsubscribe', `${body}.${mac}==`, Date.now()).ok).toBe(false);

    const links = new LinkSigner(signer);
    const encoded = links.encode('es_1', 'https://example.com/ab');
    expect(links.decode('es_1', encoded)).toBe('https://example.com/ab');
    const [u, ...rest] = encoded.split('.');
    const respelled = [respell(u!), ...rest].join('.');
    expect(Buffer.from(respell(u!), 'base64url').toString()).toBe('https://example.com/ab');
    expect(links.decode('es_1', respelled)).toBeNull();
  });

  it('/send refuses the headers it would have dropped (From, Bcc, DKIM-*) and Authentication-Results, with 400 reserved_header', async () => {
    const job = (headers: Record<string, string>, id: string) => ({
      messageId: id, to: 'r@example.org', from: 'a@sender.example', subject: 's', html: '<p>x</p>', ipPool: 'transactional', organizationId: 'o', dkimDomain: 'sender.example', headers,
    });
    for (const [i, name] of ['From', 'Bcc', 'DKIM-Signature', 'dkim-anything', 'Authentication-Results', 'ARC-Seal', 'Content-Type'].entries()) {
      const r = await p.call(p.mta, 'POST', '/send', { auth: 'mta', body: job({ [name]: 'x' }, `rh-${i}`) });
      expect(r.status, name).toBe(400);
      expect(r.body.error.data.reason, name).toBe('reserved_header');
    }
    expect((await p.call(p.mta, 'POST', '/send', { auth: 'mta', body: job({ 'X-Campaign': 'x', 'List-Id': 'l' }, 'rh-ok') })).status).toBe(202);
    // The backend's door has the same list.
    const t = await p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, body: { to: 'r@example.org', from: 'a@sender.example', subject: 's', html: '<p>x</p>', headers: { 'DKIM-Whatever': 'x' } } });
    expect(t.status).toBe(400);
    expect(t.body.error.data.reason).toBe('reserved_header');
  });

  it("a caller's CFBL-* headers, in any case, are removed rather than refused at both doors (the MTA writes its own pair)", async () => {
    const headers = { 'CFBL-Address': 'fbl@evil.test; report=arf', 'cfbl-feedback-id': 'forged', 'X-Keep': 'k' };
    const t = await p.call(p.backend, 'POST', '/api/v1/transactional', { auth: key, body: { to: 'cfbl@example.org', from: 'a@sender.example', subject: 's', html: '<p>x</p>', headers } });
    expect(t.status, JSON.stringify(t.body)).toBe(202);
    const s = await p.call(p.mta, 'POST', '/send', { auth: 'mta', body: { messageId: 'cfbl-direct', to: 'r@example.org', from: 'a@sender.example', subject: 's', html: '<p>x</p>', ipPool: 'transactional', organizationId: 'o', dkimDomain: 'sender.example', headers } });
    expect(s.status, JSON.stringify(s.body)).toBe(202);
    // What is queued no longer carries them: the job's payload, as the deliverer reads it.
    const jobs = await p.app.db.pool.query<{ payload: Buffer }>(`SELECT payload FROM queue_jobs WHERE queue = 'mta'`);
    const queued = jobs.rows.map((j) => JSON.parse(decodePayload(j.payload))).filter((j) => j.messageId === t.body.data.id || j.messageId === 'cfbl-direct');
    expect(queued).toHaveLength(2);
    for (const j of queued) expect(j.headers).toEqual({ 'X-Keep': 'k' });
  });
});
