/**
 * Inbound routes and the mailbox cache (docs/inbound.md): the Master-key routes and their
 * validation, freshness across two MTA instances on one database, and real senders (nodemailer,
 * swaks) delivering to routed addresses, cached mailboxes and unknown recipients, with the
 * team-inbox event and the mailbox delivery posted to a real HTTP receiver on loopback.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { connect } from 'node:net';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { eventually, postedEvents, startMta, type TestMta } from '../helpers.js';
import { hmacSha256Hex } from '../../../src/shared/crypto.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { OutboxStore } from '../../../src/mta/outbox/store.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';

const SECRET = 'routing-test-secret';
let backend: HttpReceiver;
let t: TestMta;
let other: TestMta;

beforeAll(async () => {
  backend = await startHttpReceiver();
  t = await startMta({ start: true, env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: SECRET, BOUNCE_HOST: 'mx.lettermill.test' } });
  other = await startMta({ db: t.db, env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`, MTA_WEBHOOK_SECRET: SECRET } });
  const privateKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  for (const domain of ['crud.test', 'one.test', 'two.test']) expect((await t.call('POST', '/dkim', { domain, selector: 's1', privateKey })).status).toBeLessThan(300);
}, 60_000);
afterAll(async () => {
  await other?.close();
  await t?.close();
  await backend?.close();
});
beforeEach(() => backend.reset());

const port = () => t.mta.inbound.port!;

async function send(to: string[], raw: string, from = 'alice@outside.test'): Promise<{ ok: true; response: string } | { ok: false; code: number | undefined; response: string }> {
  const transport = nodemailer.createTransport({ host: '127.0.0.1', port: port(), secure: false, ignoreTLS: true, name: 'mx.outside.test' });
  try {
    const info = await transport.sendMail({ envelope: { from, to }, raw });
    return { ok: true, response: info.response };
  } catch (err) {
    const e = err as { responseCode?: number; response?: string; message: string };
    return { ok: false, code: e.responseCode, response: e.response ?? e.message };
  } finally {
    transport.close();
  }
}

const message = (o: { subject?: string; headers?: string[] } = {}) =>
  [
    'From: Alice Example <alice@outside.test>',
    'To: support@acme.test',
    `Subject: ${o.subject ?? 'Help please'}`,
    'Message-ID: <q1@outside.test>',
    'In-Reply-To: <lm-send-1@acme.test>',
    'References: <lm-send-0@acme.test> <lm-send-1@acme.test>',
    ...(o.headers ?? []),
    'MIME-Version: 1.0',
    'Content-Type: multipart/mixed; boundary="b1"',
    '',
    '--b1',
    'Content-Type: text/plain; charset=utf-8',
    '',
    'My order is late.',
    '--b1',
    'Content-Type: application/pdf; name="invoice.pdf"',
    'Content-Disposition: attachment; filename="invoice.pdf"',
    'Content-Transfer-Encoding: base64',
    '',
    Buffer.from('%PDF-1.4 fake invoice bytes').toString('base64'),
    '--b1--',
    '',
  ].join('\r\n');

describe('the Master-key routes', () => {
  it('validate every field and answer in the error envelope', async () => {
    const bad = [
      [{ domain: 'not a domain', address: 'x', action: 'inbox' }, 400, 'invalid_domain'],
      [{ domain: 'acme.test', address: 'a@b', action: 'inbox' }, 400, 'invalid_address'],
      [{ domain: 'acme.test', address: 'x', action: 'forward' }, 400, 'targets_required'],
      [{ domain: 'acme.test', address: 'x', action: 'forward', targets: ['nope'] }, 400, 'invalid_target'],
      [{ domain: 'acme.test', address: 'x', action: 'inbox', targets: ['a@b.test'] }, 400, 'unexpected_targets'],
    ] as const;
    for (const [body, status, reason] of bad) {
      const r = await t.call('POST', '/inbound/routes', body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(r.body.error.data.reason).toBe(reason);
    }
    const unsigned = await t.call('POST', '/inbound/routes', { domain: 'nokey.test', address: 'x', action: 'forward', targets: ['a@b.test'] });
    expect(unsigned.status).toBe(409);
    expect(unsigned.body.error.data.reason).toBe('dkim_key_missing');
    const schema = await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: 'x', action: 'archive' });
    expect(schema.status).toBe(400);
    expect(schema.body.error).toBeTruthy();
    expect((await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: 'x', action: 'inbox' }, null)).status).toBe(401);
    expect((await t.call('POST', '/mailboxes/cache/not-an-address', { mailboxId: 'mb', organizationId: 'o' })).body.error.data.reason).toBe('invalid_address');
    expect((await t.call('POST', '/mailboxes/cache/a@acme.test', { mailboxId: 'mb', organizationId: 'o', quota: -1 })).status).toBe(400);
    expect((await t.call('DELETE', '/inbound/routes/acme.test/nobody')).status).toBe(404);
    expect((await t.call('DELETE', '/mailboxes/cache/nobody@acme.test')).status).toBe(404);
  });

  it('create, update, list and delete; another instance sees each change', async () => {
    const c = await t.call('POST', '/inbound/routes', { domain: 'Crud.Test', address: 'Sales', action: 'inbox' });
    expect(c.status).toBe(201);
    expect(c.body.data).toMatchObject({ domain: 'crud.test', address: 'sales', action: 'inbox', targets: [] });
    await eventually(() => other.mta.context.stores.routes.exact('sales', 'crud.test'));
    const u = await t.call('POST', '/inbound/routes', { domain: 'crud.test', address: 'sales', action: 'forward', targets: ['boss@elsewhere.test'] });
    expect(u.status).toBe(200);
    expect(u.body.data.targets).toEqual(['boss@elsewhere.test']);
    await eventually(() => other.mta.context.stores.routes.exact('sales', 'crud.test')?.action === 'forward');
    expect((await other.call('GET', '/inbound/routes')).body.data.map((r: { address: string }) => r.address)).toContain('sales');
    expect((await t.call('DELETE', '/inbound/routes/crud.test/sales')).body.data.deleted).toBe(true);
    await eventually(() => other.mta.context.stores.routes.exact('sales', 'crud.test') === null);

    const m = await t.call('POST', '/mailboxes/cache/Bob@Crud.Test', { mailboxId: 'mb-1', organizationId: 'org-1', quota: 1000 });
    expect(m.status).toBe(201);
    expect(m.body.data).toMatchObject({ address: 'bob@crud.test', quota: 1000, usedBytes: 0 });
    await eventually(() => other.mta.context.stores.mailboxes.get('bob@crud.test'));
    expect((await other.call('GET', '/mailboxes/cache')).body.data[0].address).toBe('bob@crud.test');
    expect((await t.call('DELETE', '/mailboxes/cache/bob@crud.test')).status).toBe(200);
    await eventually(() => other.mta.context.stores.mailboxes.get('bob@crud.test') === null);
  });

  it('refuse a forward to an address received here, and receiving an address that is forwarded to', async () => {
    expect((await t.call('POST', '/inbound/routes', { domain: 'one.test', address: 'a', action: 'forward', targets: ['b@two.test'] })).status).toBe(201);
    const back = await t.call('POST', '/inbound/routes', { domain: 'two.test', address: 'b', action: 'forward', targets: ['a@one.test'] });
    expect(back.status).toBe(409);
    expect(back.body.error.data.reason).toBe('forward_loop');
    expect((await t.call('POST', '/inbound/routes', { domain: 'two.test', address: '*', action: 'inbox' })).body.error.data.reason).toBe('forward_loop');
    expect((await t.call('POST', '/mailboxes/cache/b@two.test', { mailboxId: 'm', organizationId: 'o' })).body.error.data.reason).toBe('forward_loop');
    expect((await t.call('POST', '/inbound/routes', { domain: 'one.test', address: '*', action: 'forward', targets: ['x@one.test'] })).body.error.data.reason).toBe('forward_loop');
    await t.call('DELETE', '/inbound/routes/one.test/a');
  });
});

describe('reception', () => {
  beforeAll(async () => {
    expect((await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: 'support', action: 'inbox' })).status).toBe(201);
    expect((await t.call('POST', '/inbound/routes', { domain: 'acme.test', address: '*', action: 'inbox' })).status).toBe(201);
    expect((await t.call('POST', '/inbound/routes', { domain: 'exact.test', address: 'team', action: 'inbox' })).status).toBe(201);
    expect((await t.call('POST', '/mailboxes/cache/carol@acme.test', { mailboxId: 'mb-carol', organizationId: 'org-1', quota: 100_000 })).status).toBe(201);
  });

  it('an unknown recipient gets 550 5.1.1 at RCPT; a known one next to it is still taken', async () => {
    const r = await send(['nobody@exact.test'], message());
    expect(r.ok).toBe(false);
    expect(r.response).toMatch(/^550 5\.1\.1/);
    const both = await send(['team@exact.test', 'nobody@exact.test'], message());
    expect(both.ok).toBe(true);
    const [e] = postedEvents(await backend.waitFor(1));
    expect(e!.data.to).toEqual(['team@exact.test']);
    await t.mta.context.relay.settle();
  });

  it('a routed address produces inbound.received with the parsed message, signed, through the outbox', async () => {
    const r = await send(['Support@acme.test'], message());
    expect(r.ok).toBe(true);
    const [req] = await backend.waitFor(1);
    expect(req!.url).toBe('/webhooks/mta');
    const ts = req!.headers['x-mta-timestamp'] as string;
    expect(req!.headers['x-mta-signature']).toBe(hmacSha256Hex(SECRET, `${ts}.${req!.rawBody.toString()}`));
    const [e] = postedEvents([req!]);
    expect(e!.event).toBe('inbound.received');
    expect(e!.data).toMatchObject({
      from: 'Alice Example <alice@outside.test>',
      to: ['Support@acme.test'],
      subject: 'Help please',
      messageId: '<q1@outside.test>',
      inReplyTo: '<lm-send-1@acme.test>',
      references: ['<lm-send-0@acme.test>', '<lm-send-1@acme.test>'],
      route: { domain: 'acme.test', address: 'support' },
      attachments: [{ filename: 'invoice.pdf', contentType: 'application/pdf', size: 27 }],
      authentication: { spf: 'none', dkim: 'none', dmarc: 'none' },
    });
    expect(e!.data.text).toContain('My order is late.');
    const raw = Buffer.from(e!.data.raw, 'base64');
    expect(raw.length).toBe(e!.data.rawSize);
    expect(raw.toString()).toMatch(/^Authentication-Results: mx\.lettermill\.test; none\r\n/);
    expect(raw.toString()).toContain(message().split('\r\n')[0]);
    // Delivered: the outbox row is gone.
    await eventually(async () => (await t.db.pool.query('SELECT count(*)::int AS n FROM mta_outbox')).rows[0].n === 0);
  });

  it('the same message sent again (a 250 the sender never saw) is the same event, kept once by id', async () => {
    const raw = message({ subject: 'sent twice' });
    expect((await send(['support@acme.test'], raw)).ok).toBe(true);
    expect((await send(['support@acme.test'], raw)).ok).toBe(true);
    await t.mta.context.relay.settle();
    const ids = postedEvents(backend.requests).filter((e) => e.data.subject === 'sent twice').map((e) => e.id);
    expect(ids.length).toBeGreaterThanOrEqual(1);
    expect(new Set(ids).size).toBe(1);
  });

  it('an exact route wins over the catch-all; any other address of the domain takes the catch-all', async () => {
    await send(['someone-else@acme.test'], message({ subject: 'catch all' }));
    const [e] = postedEvents(await backend.waitFor(1));
    expect(e!.data.route).toEqual({ domain: 'acme.test', address: '*' });
    expect(e!.data.subject).toBe('catch all');
    await t.mta.context.relay.settle();
  });

  it('loops are refused: our loop header, and too many Received fields', async () => {
    const looped = await send(['support@acme.test'], message({ headers: ['X-Lettermill-Loop: one.test'] }));
    expect(looped.ok).toBe(false);
    expect(looped.response).toMatch(/^554 5\.4\.6/);
    const hops = Array.from({ length: 31 }, (_, i) => `Received: from hop${i}.test by hop${i + 1}.test; Thu, 26 Nov 2026 03:00:00 +0000`);
    const many = await send(['support@acme.test'], message({ headers: hops }));
    expect(many.response).toMatch(/^554 5\.4\.6/);
    expect(backend.requests).toHaveLength(0);
    const metrics = (await t.call('GET', '/metrics')).body as string;
    expect(metrics).toMatch(/^mta_inbound_routed_total\{kind="inbox",outcome="loop"\} 2$/m);
    expect(Number(/^mta_inbound_routed_total\{kind="inbox",outcome="accepted"\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(3);
  });

  it('swaks: a routed address is taken with 250, an unknown one refused at RCPT', async () => {
    const swaks = (args: string[]) =>
      new Promise<string>((resolve) => {
        const child = execFile('swaks', ['--server', '127.0.0.1', '--port', String(port()), '--helo', 'mx.outside.test', '--timeout', '20', ...args], { timeout: 30_000 }, (_err, stdout, stderr) => resolve(`${stdout}${stderr}`));
        child.stdin?.end();
      });
    expect(await swaks(['--from', 'alice@outside.test', '--to', 'team@exact.test', '--header', 'Subject: via swaks'])).toMatch(/<-\s+250 .*\r?\n[\s\S]*QUIT/);
    const [e] = postedEvents(await backend.waitFor(1));
    expect(e!.data.subject).toBe('via swaks');
    await t.mta.context.relay.settle();
    expect(await swaks(['--from', 'alice@outside.test', '--to', 'ghost@exact.test', '--quit-after', 'RCPT'])).toMatch(/<\*\*\s+550 5\.1\.1/);
  });
});

describe('personal mailboxes', () => {
  it('mail waits in the outbox while the backend is down and arrives once; usedBytes then drives 452 4.2.2', async () => {
    let up = false;
    backend.setResponder((req) => {
      if (!up) return 503;
      const body = JSON.parse(req.rawBody.toString());
      return { status: 200, body: { data: { stored: true, duplicate: false, usedBytes: 60_000 + body.rawSize } } };
    });
    const r = await send(['carol@acme.test'], message({ subject: 'for carol' }));
    expect(r.ok).toBe(true);
    const [first] = await backend.waitFor(1);
    expect(first!.url).toBe('/webhooks/mta-mailbox');
    const d = JSON.parse(first!.rawBody.toString());
    expect(d).toMatchObject({ mailboxId: 'mb-carol', organizationId: 'org-1', address: 'carol@acme.test', envelopeFrom: 'alice@outside.test', authentication: { dmarc: 'none' } });
    expect(Buffer.from(d.raw, 'base64').length).toBe(d.rawSize);
    expect(first!.headers['x-mta-signature']).toBe(hmacSha256Hex(SECRET, `${first!.headers['x-mta-timestamp']}.${first!.rawBody.toString()}`));

    // Still pending after the refusal; the next attempt is due by the schedule.
    await t.mta.context.relay.settle();
    const pending = await t.db.pool.query(`SELECT attempts, state FROM mta_outbox WHERE id = $1`, [d.id]);
    expect(pending.rows[0]).toMatchObject({ attempts: 1, state: 'pending' });
    up = true;
    t.clock.advance(31_000);
    await t.mta.context.relay.poll();
    await eventually(() => backend.requests.length >= 2);
    await t.mta.context.relay.settle();
    expect(backend.requests.map((q) => JSON.parse(q.rawBody.toString()).id)).toEqual([d.id, d.id]);
    expect((await t.db.pool.query('SELECT count(*)::int AS n FROM mta_outbox WHERE id = $1', [d.id])).rows[0].n).toBe(0);
    t.clock.advance(3_600_000);
    await t.mta.context.relay.poll();
    expect(backend.requests).toHaveLength(2);

    // The answer's usedBytes is kept beside the quota: in the row, and here at once; the other instance at its next reload.
    await eventually(() => t.mta.context.stores.mailboxes.get('carol@acme.test')!.usedBytes === 60_000 + d.rawSize);
    expect((await t.db.pool.query(`SELECT used_bytes::int AS n FROM mta_mailbox_cache WHERE address = 'carol@acme.test'`)).rows[0].n).toBe(60_000 + d.rawSize);
    await other.mta.context.stores.mailboxes.reload();
    expect(other.mta.context.stores.mailboxes.get('carol@acme.test')!.usedBytes).toBe(60_000 + d.rawSize);
    // Under the quota by a small message; over it by a big one (MAIL FROM SIZE) or once full.
    const big = await send(['carol@acme.test'], message({ subject: 'x'.repeat(45_000) }));
    expect(big.ok).toBe(true); // nodemailer gives no SIZE: the stored answer is below the quota
    const after = await eventually(() => (backend.requests.length >= 3 ? backend.requests[2] : null));
    const used = JSON.parse(after.rawBody.toString()).rawSize + 60_000;
    expect(used).toBeGreaterThan(100_000);
    await eventually(() => t.mta.context.stores.mailboxes.get('carol@acme.test')!.usedBytes >= 100_000);
    const full = await send(['carol@acme.test'], message());
    expect(full.ok).toBe(false);
    expect(full.response).toMatch(/^452 4\.2\.2/);
    backend.setResponder(undefined);
  });

  it('MAIL FROM SIZE past the quota gets 452 4.2.2 at RCPT; within it, swaks delivers to the mailbox', async () => {
    expect((await t.call('POST', '/mailboxes/cache/erin@acme.test', { mailboxId: 'mb-erin', organizationId: 'org-1', quota: 5_000 })).status).toBe(201);
    const rcpt = async (size: number) => {
      const socket = connect(port(), '127.0.0.1');
      let buffer = '';
      const replies: string[] = [];
      let waiting: (() => void) | null = null;
      socket.on('data', (d) => {
        buffer += d.toString();
        if (/(?:^|\r\n)\d{3} [^\r\n]*\r\n$/.test(buffer)) {
          replies.push(buffer);
          buffer = '';
          waiting?.();
        }
      });
      const next = () => new Promise<void>((r) => (waiting = r));
      await next();
      for (const line of ['EHLO mx.outside.test', `MAIL FROM:<alice@outside.test> SIZE=${size}`, 'RCPT TO:<erin@acme.test>']) {
        const p = next();
        socket.write(`${line}\r\n`);
        await p;
      }
      socket.end('QUIT\r\n');
      return replies.at(-1)!;
    };
    await eventually(() => t.mta.context.stores.mailboxes.get('erin@acme.test'));
    expect(await rcpt(6_000)).toMatch(/^452 4\.2\.2/);
    expect(await rcpt(1_000)).toMatch(/^250/);

    backend.setResponder(() => ({ status: 200, body: { data: { stored: true, duplicate: false, usedBytes: 1_234 } } }));
    const out = await new Promise<string>((resolve) => {
      const child = execFile('swaks', ['--server', '127.0.0.1', '--port', String(port()), '--helo', 'mx.outside.test', '--timeout', '20', '--from', 'alice@outside.test', '--to', 'erin@acme.test', '--header', 'Subject: to erin'], { timeout: 30_000 }, (_e, so, se) => resolve(`${so}${se}`));
      child.stdin?.end();
    });
    expect(out).toMatch(/<-\s+250 /);
    const [req] = await backend.waitFor(1);
    expect(req!.url).toBe('/webhooks/mta-mailbox');
    expect(Buffer.from(JSON.parse(req!.rawBody.toString()).raw, 'base64').toString()).toContain('Subject: to erin');
    await eventually(() => t.mta.context.stores.mailboxes.get('erin@acme.test')!.usedBytes === 1_234);
    backend.setResponder(undefined);
  });

  it('a delivery the backend keeps refusing is dead-lettered, listed without its bytes, and a DLQ retry posts it again', async () => {
    backend.setResponder(() => 503);
    expect((await t.call('POST', '/mailboxes/cache/frank@acme.test', { mailboxId: 'mb-frank', organizationId: 'org-1' })).status).toBe(201);
    await eventually(() => t.mta.context.stores.mailboxes.get('frank@acme.test'));
    expect((await send(['frank@acme.test'], message({ subject: 'for frank' }))).ok).toBe(true);
    await t.mta.context.relay.settle();
    for (let i = 0; i < DEFAULT_POLICY.events.maxAttempts; i++) {
      t.clock.advance(2 * 3_600_000);
      await t.mta.context.relay.poll();
      await t.mta.context.relay.settle();
    }
    const dlq = await t.call('GET', '/dlq');
    expect(dlq.status).toBe(200);
    const entry = dlq.body.data.find((e: { event: string }) => e.event === 'mta-mailbox');
    expect(entry).toBeTruthy();
    expect(entry.body.data).toMatchObject({ address: 'frank@acme.test', mailboxId: 'mb-frank', rawOmitted: true });
    expect(entry.body.data.raw).toBeUndefined();
    expect(entry.attempts).toBe(DEFAULT_POLICY.events.maxAttempts);
    backend.reset();
    backend.setResponder(() => ({ status: 200, body: { data: { stored: true, duplicate: false, usedBytes: 1 } } }));
    expect((await t.call('POST', `/dlq/${entry.id}/retry`)).status).toBe(202);
    const [again] = await backend.waitFor(1);
    expect(again!.url).toBe('/webhooks/mta-mailbox');
    expect(Buffer.from(JSON.parse(again!.rawBody.toString()).raw, 'base64').toString()).toContain('Subject: for frank');
    await t.mta.context.relay.settle();
    backend.setResponder(undefined);
  });

  it('fails closed: without a webhook secret mailbox and inbox mail get 451, nothing is written', async () => {
    const bare = await startMta({ db: t.db, start: true, env: { MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta` } });
    try {
      await eventually(() => bare.mta.context.stores.mailboxes.get('carol@acme.test'));
      const before = (await t.db.pool.query('SELECT count(*)::int AS n FROM mta_outbox')).rows[0].n;
      const transport = nodemailer.createTransport({ host: '127.0.0.1', port: bare.mta.inbound.port!, secure: false, ignoreTLS: true });
      for (const to of ['support@acme.test', 'dave@acme.test']) {
        const err = await transport.sendMail({ envelope: { from: 'alice@outside.test', to: [to] }, raw: message() }).catch((e: { response: string }) => e);
        expect((err as { response: string }).response).toMatch(/^451 4\.3\.0/);
      }
      transport.close();
      expect((await t.db.pool.query('SELECT count(*)::int AS n FROM mta_outbox')).rows[0].n).toBe(before);
    } finally {
      await bare.close();
    }
  });
});

describe('large messages through the outbox', () => {
  it('a 6 MB message is posted as one event on its own, intact; a backlog is claimed a few megabytes at a time', async () => {
    const attachment = Buffer.alloc(6 * 1024 * 1024, 7).toString('base64').replace(/.{76}/g, '$&\r\n');
    const big = message().replace(Buffer.from('%PDF-1.4 fake invoice bytes').toString('base64'), attachment);
    const [a, b] = await Promise.all([send(['support@acme.test'], big), send(['support@acme.test'], message({ subject: 'small' }))]);
    expect(a.ok && b.ok).toBe(true);
    const reqs = await backend.waitFor(2, 30_000);
    const large = reqs.find((r) => r.rawBody.length > 1_000_000)!;
    const body = JSON.parse(large.rawBody.toString());
    expect(Array.isArray(body)).toBe(false);
    expect(body.data.attachments[0].size).toBe(6 * 1024 * 1024);
    expect(Buffer.from(body.data.raw, 'base64').length).toBe(body.data.rawSize);
    expect(body.data.rawSize).toBeGreaterThan(big.length);
    await t.mta.context.relay.settle();

    // Rows of 1 MB each, due: a claim bounded to 2.5 MB takes two (and always at least one).
    const store = t.mta.context.stores.outbox;
    const rows = [1, 2, 3].map((i) => ({ id: `mevt_big_${i}`, event: 'inbound.received' as const, body: JSON.stringify({ pad: 'x'.repeat(1024 * 1024), i }) }));
    await store.insert(rows);
    // Claimed by a store whose clock is past their lease; the relays (on t.clock) do not see them due.
    const later = new OutboxStore(t.db.pool, new ManualClock(t.clock.now() + 60_000), DEFAULT_POLICY.events);
    const first = await later.claimDue(500, 2.5 * 1024 * 1024);
    expect(first.map((r) => r.id)).toEqual(['mevt_big_1', 'mevt_big_2']);
    const second = await later.claimDue(500, 1);
    expect(second.map((r) => r.id)).toEqual(['mevt_big_3']);
    await store.delivered(rows.map((r) => r.id));
  }, 60_000);
});
