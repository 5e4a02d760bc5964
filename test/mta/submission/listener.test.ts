/**
 * The SMTP submission listener against real clients (swaks, nodemailer) and a real MTA on a
 * per-file database: STARTTLS before AUTH, each refusal code of docs/submission.md, one
 * queued raw job per envelope recipient, and the idempotency rules (mta.md 1–4) observed in
 * the queue. Delivery itself is in delivery-e2e.test.ts.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../src/shared/config.js';
import { createMta } from '../../../src/mta/app.js';
import { DEFAULT_POLICY } from '../../../src/mta/policy.js';
import { silentLogger } from '../../../src/shared/log.js';
import { decodePayload } from '../../../src/shared/queue/payload-codec.js';
import { createTestCa } from '../../harness/tls.js';
import { MASTER, payload, startMta, type TestMta } from '../helpers.js';

const HOST = 'submit.sender.test';
const LIMIT = 64 * 1024;
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let t: TestMta;
let dir: string;
let ca: string;
let orgKey: string;
let port: number;

beforeAll(async () => {
  const certs = await createTestCa({ dnsNames: [HOST], ips: ['127.0.0.1'] });
  ca = certs.caCert;
  dir = mkdtempSync(join(tmpdir(), 'lm-submission-'));
  writeFileSync(join(dir, 'cert.pem'), certs.chain);
  writeFileSync(join(dir, 'key.pem'), certs.key);
  const policy = { ...DEFAULT_POLICY, submission: { ...DEFAULT_POLICY.submission, maxMessageBytes: LIMIT, authFailures: { max: 3, windowMs: 60_000, banMs: 600_000 } } };
  t = await startMta({
    start: true,
    options: { policy },
    env: {
      BOUNCE_VERP_KEY: 'submission-key-0123456789abcdef',
      BOUNCE_HOST: HOST,
      SUBMISSION_ENABLED: 'true',
      SUBMISSION_PORT: '0',
      SUBMISSION_TLS_PORT: '0',
      SUBMISSION_HOST: '127.0.0.1',
      SUBMISSION_TLS_CERT: join(dir, 'cert.pem'),
      SUBMISSION_TLS_KEY: join(dir, 'key.pem'),
    },
  });
  port = t.mta.submission!.starttls.port!;
  expect((await t.call('POST', '/dkim', { domain: 'sender.test', selector: 's1', privateKey: rsaPem })).status).toBeLessThan(300);
  const cred = await t.call('POST', '/credentials', { organizationId: 'org-7' });
  expect(cred.status).toBeLessThan(300);
  orgKey = cred.body.data.apiKey;
}, 60_000);

afterAll(async () => {
  await t?.close();
  rmSync(dir, { recursive: true, force: true });
});

// stdin closed: swaks prompts for anything it misses, and a prompt would wait forever.
const swaks = (args: string[], p = port) =>
  new Promise<{ code: number; out: string }>((resolve) => {
    const child = execFile('swaks', ['--server', '127.0.0.1', '--port', String(p), '--helo', 'client.test', '--timeout', '20', ...args], { timeout: 30_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
    child.stdin?.end();
  });
const authed = (password = MASTER, method = 'PLAIN') => ['--tls', '--auth', method, '--auth-user', 'ignored', '--auth-password', password];

let n = 0;
function message(extra = '', body = 'Hello from a script.\r\n'): string {
  n++;
  return `From: App <app@sender.test>\r\nTo: a@dest.test\r\nSubject: test ${n}\r\n${extra}\r\n${body}`;
}
function file(content: string): string {
  const f = join(dir, `m${++n}.eml`);
  writeFileSync(f, content);
  return f;
}

async function jobs(): Promise<{ id: string; payload: any }[]> {
  const r = await t.db.pool.query<{ id: string; payload: Buffer }>("SELECT id::text, payload FROM queue_jobs WHERE queue = 'mta' ORDER BY id");
  return r.rows.map((row) => ({ id: row.id, payload: JSON.parse(decodePayload(row.payload)) }));
}
const queuedIds = (out: string) => /<~?\s+250 2\.0\.0 Queued as ([\d ]+)/.exec(out)?.[1]?.trim().split(' ') ?? [];

describe('TLS and AUTH', () => {
  it('announces AUTH only after STARTTLS, with SIZE and the idempotency parameters', async () => {
    const plain = await swaks(['--quit-after', 'EHLO']);
    expect(plain.out).toMatch(/250-STARTTLS/);
    expect(plain.out).not.toMatch(/250[- ]AUTH/);
    const tls = await swaks(['--tls', '--quit-after', 'EHLO']);
    expect(tls.out).toMatch(/250[- ]AUTH PLAIN LOGIN/);
    expect(tls.out).toMatch(/250[- ]SIZE 65536/);
    expect(tls.out).toMatch(/250[- ]XLETTERMILLID/);
    expect(tls.out).toMatch(/250[- ]XLETTERMILLDEDUP/);
  });

  it('AUTH or MAIL before TLS gets 530 5.7.0', async () => {
    // swaks sends no AUTH that is not advertised: a raw session does.
    const auth = await rawSession([`AUTH PLAIN ${Buffer.from(`\0x\0${MASTER}`).toString('base64')}`], false);
    expect(auth.at(-1)).toMatch(/^530 5\.7\.0/);
    const mail = await swaks(['--from', 'app@sender.test', '--to', 'a@dest.test', '--quit-after', 'MAIL']);
    expect(mail.out).toMatch(/<\*\*\s+530 5\.7\.0/);
  });

  it('takes the master key and an organization key with PLAIN and LOGIN; the username is ignored', async () => {
    for (const [pw, method] of [[MASTER, 'PLAIN'], [MASTER, 'LOGIN'], [orgKey, 'PLAIN'], [orgKey, 'LOGIN']] as const) {
      const r = await swaks([...authed(pw, method), '--quit-after', 'AUTH']);
      expect(r.out).toMatch(/<~\s+235/);
    }
  });

  it('implicit TLS (SUBMISSION_TLS_PORT) takes AUTH and a message at once', async () => {
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port: t.mta.submission!.implicitTls!.port!, secure: true, tls: { ca, servername: HOST }, auth: { user: 'x', pass: MASTER } });
    try {
      const info = await transport.sendMail({ envelope: { from: 'app@sender.test', to: ['tls465@dest.test'] }, raw: message() });
      expect(info.response).toMatch(/^250 2\.0\.0 Queued as \d+$/);
    } finally {
      transport.close();
    }
  });

  it('an organization key scopes the message to its organization', async () => {
    const r = await swaks([...authed(orgKey), '--from', 'app@sender.test', '--to', 'scoped@dest.test', '--data', file(message())]);
    const [id] = queuedIds(r.out);
    const job = (await jobs()).find((j) => j.id === id)!;
    expect(job.payload.organizationId).toBe('org-7');
  });

  it('a wrong password gets 535 5.7.8; repeated failures get 421 4.7.0 and a ban that ends', async () => {
    const bad = await swaks([...authed('lm_org_wrong_password_xxxxxxxxxxxxxxxxxxxxx'), '--quit-after', 'AUTH']);
    expect(bad.out).toMatch(/<~\*+\s+535 5\.7\.8/);
    await swaks([...authed('nope'), '--quit-after', 'AUTH']);
    await swaks([...authed('nope2'), '--quit-after', 'AUTH']);
    // Banned: even the right key is refused for now.
    const banned = await swaks([...authed(MASTER), '--quit-after', 'AUTH']);
    expect(banned.out).toMatch(/<~\*+\s+421 4\.7\.0/);
    t.clock.advance(600_001);
    const after = await swaks([...authed(MASTER), '--quit-after', 'AUTH']);
    expect(after.out).toMatch(/<~\s+235/);
  });
});

describe('message rules', () => {
  it('each envelope recipient becomes one raw job; To/Cc/Bcc decide nothing and Bcc is stripped', async () => {
    const before = (await jobs()).length;
    const content = message('Cc: c@dest.test\r\nBcc: secret@dest.test,\r\n  other@dest.test\r\n');
    const r = await swaks([...authed(), '--from', 'app@sender.test', '--to', 'one@dest.test,two@dest.test,three@other.test', '--data', file(content), '--pipeline']);
    const ids = queuedIds(r.out);
    expect(ids).toHaveLength(3);
    const all = await jobs();
    expect(all.length - before).toBe(3);
    const queued = all.filter((j) => ids.includes(j.id));
    expect(queued.map((j) => j.payload.to).sort()).toEqual(['one@dest.test', 'three@other.test', 'two@dest.test']);
    for (const j of queued) {
      expect(j.payload.ipPool).toBe('transactional');
      expect(j.payload.dkimDomain).toBe('sender.test');
      expect(j.payload.subject).toBeUndefined();
      // The octets are not in the job: it names the one body stored for this DATA.
      expect(j.payload.raw).toBeUndefined();
    }
    expect(new Set(queued.map((j) => j.payload.rawBody)).size).toBe(1);
    const body = await t.db.pool.query<{ raw: Buffer; job_ids: string[] }>('SELECT raw, job_ids::text[] AS job_ids FROM mta_submission_bodies WHERE id = $1', [queued[0]!.payload.rawBody]);
    expect(body.rows).toHaveLength(1);
    expect([...body.rows[0]!.job_ids].sort()).toEqual([...ids].sort());
    const raw = body.rows[0]!.raw.toString('latin1');
    expect(raw).not.toMatch(/^Bcc:/im);
    expect(raw).not.toContain('secret@dest.test');
    expect(raw).toContain('Cc: c@dest.test\r\n');
    expect(raw).toContain('Subject:');
  });

  it('the dispatcher reads the stored body back; it is deleted once no pending or active job reads it, not before', async () => {
    // Every delivery deferred meanwhile: the jobs go back to pending (retry by backoff).
    const fallback = t.deliverer.fallback;
    t.deliverer.fallback = { status: 'deferred', code: 451, response: '451 try later', connectionFailure: false };
    try {
      const content = message();
      const r = await swaks([...authed(), '--from', 'app@sender.test', '--to', 'keep1@dest.test,keep2@dest.test', '--data', file(content), '--pipeline']);
      const ids = queuedIds(r.out);
      expect(ids).toHaveLength(2);
      const bodyId = (await jobs()).find((j) => j.id === ids[0])!.payload.rawBody as string;
      const state = async (id: string) => (await t.mta.context.queue.get(id))!.state;
      const deadline = Date.now() + 20_000;
      for (;;) {
        const tried = t.deliverer.calls.filter((c) => c.message.to === 'keep1@dest.test' || c.message.to === 'keep2@dest.test');
        if (tried.length >= 2 && (await state(ids[0]!)) === 'pending' && (await state(ids[1]!)) === 'pending') break;
        if (Date.now() > deadline) throw new Error('the two jobs were not attempted');
        await new Promise((res) => setTimeout(res, 50));
      }
      // What reached the deliverer is the stored octets (the DATA swaks sent), for both jobs.
      const stored = (await t.db.pool.query<{ raw: Buffer }>('SELECT raw FROM mta_submission_bodies WHERE id = $1', [bodyId])).rows[0]!.raw;
      expect(stored.toString('latin1').startsWith(content)).toBe(true);
      const delivered = t.deliverer.calls.filter((x) => x.message.to.startsWith('keep'));
      expect(delivered.length).toBeGreaterThanOrEqual(2);
      for (const c of delivered) expect(Buffer.from(c.message.raw!, 'base64').equals(stored)).toBe(true);
      const { SubmissionBodies } = await import('../../../src/mta/submission/bodies.js');
      const bodies = new SubmissionBodies(t.db.pool);
      const exists = async () => (await t.db.pool.query('SELECT 1 FROM mta_submission_bodies WHERE id = $1', [bodyId])).rowCount === 1;
      await bodies.purge();
      expect(await exists()).toBe(true);
      // One job finished (cancelled), one still pending: the body stays.
      expect(await t.mta.context.queue.cancel(ids[0]!)).toBe(true);
      await bodies.purge();
      expect(await exists()).toBe(true);
      expect(await t.mta.context.queue.cancel(ids[1]!)).toBe(true);
      expect(await bodies.purge()).toBeGreaterThan(0);
      expect(await exists()).toBe(false);
    } finally {
      t.deliverer.fallback = fallback;
    }
  });

  it('a job whose stored body is gone fails with a clear error instead of sending anything', async () => {
    const fallback = t.deliverer.fallback;
    t.deliverer.fallback = { status: 'deferred', code: 451, response: '451 try later', connectionFailure: false };
    try {
      const r = await swaks([...authed(), '--from', 'app@sender.test', '--to', 'lost@dest.test', '--data', file(message()), '--pipeline']);
      const [id] = queuedIds(r.out);
      const bodyId = (await jobs()).find((j) => j.id === id)!.payload.rawBody as string;
      const deadline = Date.now() + 20_000;
      while ((await t.mta.context.queue.get(id!))!.attempts < 1 || (await t.mta.context.queue.get(id!))!.state !== 'pending') {
        if (Date.now() > deadline) throw new Error('the job was not attempted');
        await new Promise((res) => setTimeout(res, 50));
      }
      const lost = () => t.deliverer.calls.filter((c) => c.message.to === 'lost@dest.test').length;
      const calls = lost();
      await t.db.pool.query('DELETE FROM mta_submission_bodies WHERE id = $1', [bodyId]);
      t.clock.advance(24 * 3_600_000); // its retry is due
      const until = Date.now() + 20_000;
      let job = await t.mta.context.queue.get(id!);
      while (job!.state === 'pending' || job!.state === 'active') {
        if (Date.now() > until) throw new Error(`the job stayed ${job!.state}`);
        await new Promise((res) => setTimeout(res, 50));
        job = await t.mta.context.queue.get(id!);
      }
      expect(job!.state).toBe('failed');
      expect(job!.lastError).toMatch(/body .* is missing/);
      expect(lost()).toBe(calls);
    } finally {
      t.deliverer.fallback = fallback;
    }
  });

  it('recipients of a transaction abandoned with RSET do not carry over to the next message', async () => {
    const r = await rawSession(['MAIL FROM:<app@sender.test>', 'RCPT TO:<abandoned@dest.test>', 'RSET', 'MAIL FROM:<app@sender.test>', 'RCPT TO:<kept@dest.test>', 'DATA', `${message()}\r\n.`]);
    const ids = /Queued as ([\d ]+)/.exec(r.at(-1)!)![1]!.trim().split(' ');
    expect(ids).toHaveLength(1);
    expect((await jobs()).find((j) => j.id === ids[0])!.payload.to).toBe('kept@dest.test');
    expect((await jobs()).some((j) => j.payload.to === 'abandoned@dest.test')).toBe(false);
  });

  it('over-size: a SIZE declaration gets 552 5.3.4 at MAIL, and a stream gets it while streaming', async () => {
    const declared = await swaks([...authed(), '--from', 'app@sender.test', '--to', 'a@dest.test', '--quit-after', 'MAIL', '--add-header', 'X: y'].concat([]), port);
    expect(declared.out).toMatch(/<~\s+250/);
    const transport = nodemailer.createTransport({ host: '127.0.0.1', port, secure: false, requireTLS: true, tls: { ca, servername: HOST }, auth: { user: 'x', pass: MASTER } });
    try {
      const big = message('', `${'x'.repeat(76)}\r\n`.repeat(2000));
      await expect(transport.sendMail({ envelope: { from: 'app@sender.test', to: ['a@dest.test'] }, raw: big })).rejects.toMatchObject({ responseCode: 552, response: expect.stringMatching(/^552 5\.3\.4/) });
    } finally {
      transport.close();
    }
    // SIZE= larger than the limit, as a client that knows the size declares it.
    const raw = await rawSession([`MAIL FROM:<app@sender.test> SIZE=${LIMIT + 1}`]);
    expect(raw.at(-1)).toMatch(/^552 5\.3\.4/);
  });

  it('a sender domain without a DKIM key gets 550 5.7.1 at MAIL, saying why', async () => {
    const r = await swaks([...authed(), '--from', 'app@nokey.test', '--to', 'a@dest.test', '--quit-after', 'MAIL']);
    expect(r.out).toMatch(/<~\*+\s+550 5\.7\.1 .*nokey\.test has no DKIM key/);
  });

  it('bad idempotency keys and key characters get 501 5.5.4', async () => {
    for (const key of ['', 'a'.repeat(201), 'semi;colon', 'bad/char', 'ü']) {
      const r = await rawSession([`MAIL FROM:<app@sender.test> XLETTERMILLID=${key}`]);
      expect(r.at(-1), key).toMatch(/^50[15] /);
    }
    const r = await rawSession([`MAIL FROM:<app@sender.test> XLETTERMILLID=bad/char`]);
    expect(r.at(-1)).toMatch(/^501 5\.5\.4/);
    const dedup = await rawSession([`MAIL FROM:<app@sender.test> XLETTERMILLDEDUP=maybe`]);
    expect(dedup.at(-1)).toMatch(/^501 5\.5\.4/);
    const header = await swaks([...authed(), '--from', 'app@sender.test', '--to', 'a@dest.test', '--data', file(message('X-Lettermill-Idempotency-Key: not allowed!\r\n'))]);
    expect(header.out).toMatch(/<~\*+\s+501 5\.5\.4/);
  });
});

describe('idempotency', () => {
  it('a key reused with a changed sender or message gets 554 5.5.4; a reordered or reduced retry gets the same jobs', async () => {
    const send = (from: string, to: string[], data: string, key = 'order-42') => rawSession([`MAIL FROM:<${from}> XLETTERMILLID=${key}`, ...to.map((r) => `RCPT TO:<${r}>`), 'DATA', `${data}\r\n.`]);
    const body = message();
    const a = await send('app@sender.test', ['r1@dest.test', 'r2@dest.test', 'r3@dest.test'], body);
    const idsA = /Queued as ([\d ]+)/.exec(a.at(-1)!)![1]!.split(' ');
    expect(idsA).toHaveLength(3);
    const before = (await jobs()).length;
    // Reordered and reduced: the same job ids, nothing new queued.
    const b = await send('app@sender.test', ['r3@dest.test', 'r1@dest.test'], body);
    expect(/Queued as ([\d ]+)/.exec(b.at(-1)!)![1]!.split(' ')).toEqual([idsA[2], idsA[0]]);
    expect((await jobs()).length).toBe(before);
    // Changed sender, changed message: permanent refusal.
    expect((await send('other@sender.test', ['r1@dest.test'], body)).at(-1)).toMatch(/^554 5\.5\.4/);
    expect((await send('app@sender.test', ['r1@dest.test'], `${body}changed\r\n`)).at(-1)).toMatch(/^554 5\.5\.4/);
    // The key also works as a header: another message under it is refused.
    const viaHeader = (text: string) => rawSession(['MAIL FROM:<app@sender.test>', 'RCPT TO:<h@dest.test>', 'DATA', `${message(`X-Lettermill-Idempotency-Key: hdr-1\r\n`, text)}\r\n.`]);
    expect((await viaHeader('first\r\n')).at(-1)).toMatch(/^250/);
    expect((await viaHeader('second\r\n')).at(-1)).toMatch(/^554 5\.5\.4/);
  });

  it('without a key the same bytes from the same sender complete only missing recipients; dedup off duplicates', async () => {
    const body = message();
    const send = (to: string[], param = '', data = body) => rawSession([`MAIL FROM:<app@sender.test>${param}`, ...to.map((r) => `RCPT TO:<${r}>`), 'DATA', `${data}\r\n.`]);
    const a = await send(['k1@dest.test']);
    const [idA] = /Queued as ([\d ]+)/.exec(a.at(-1)!)![1]!.split(' ');
    const b = await send(['k1@dest.test', 'k2@dest.test']);
    const idsB = /Queued as ([\d ]+)/.exec(b.at(-1)!)![1]!.split(' ');
    expect(idsB[0]).toBe(idA);
    expect(idsB[1]).not.toBe(idA);
    const before = (await jobs()).length;
    const c = await send(['k1@dest.test'], ' XLETTERMILLDEDUP=OFF');
    expect(/Queued as (\d+)/.exec(c.at(-1)!)![1]).not.toBe(idA);
    const d = await send(['k1@dest.test'], '', message('X-Lettermill-Deduplication: off\r\n'));
    const again = message('X-Lettermill-Deduplication: off\r\n');
    const e1 = await send(['k1@dest.test'], '', again);
    const e = await send(['k1@dest.test'], '', again);
    expect(e1.at(-1)).not.toBe(e.at(-1));
    expect(d.at(-1)).toMatch(/^250/);
    expect(e.at(-1)).toMatch(/^250/);
    expect((await jobs()).length).toBe(before + 4);
  });

  it('the same message submitted on four connections at once is queued once (one group commit or several)', async () => {
    const body = message();
    const before = (await jobs()).length;
    const replies = await Promise.all(Array.from({ length: 4 }, () => rawSession(['MAIL FROM:<app@sender.test>', 'RCPT TO:<same@dest.test>', 'DATA', `${body}\r\n.`])));
    const ids = replies.map((r) => /Queued as (\d+)/.exec(r.at(-1)!)![1]);
    expect(new Set(ids).size).toBe(1);
    expect((await jobs()).length).toBe(before + 1);
  });

  it('the leader purges receipts past four days', async () => {
    const count = async () => Number((await t.db.pool.query('SELECT count(*) FROM mta_submission_receipts')).rows[0].count);
    expect(await count()).toBeGreaterThan(0);
    const { SubmissionIntake } = await import('../../../src/mta/submission/intake.js');
    const { SubmissionBodies } = await import('../../../src/mta/submission/bodies.js');
    const intake = new SubmissionIntake(t.db.pool, t.mta.context.queue, new SubmissionBodies(t.db.pool), t.clock, DEFAULT_POLICY);
    expect(await intake.purge()).toBe(0);
    t.clock.advance(4 * 86_400_000 + 1);
    expect(await intake.purge()).toBeGreaterThan(0);
    expect(await count()).toBe(0);
  });
});

describe('back-pressure', () => {
  it('a full queue gets 452 4.3.1 at DATA, as POST /send gets its 429', async () => {
    const config = loadConfig({ NODE_ENV: 'test', MTA_API_KEY: MASTER, QUEUE_MAX_DEPTH: '1', BOUNCE_VERP_KEY: 'x'.repeat(32), BOUNCE_HOST: HOST, SUBMISSION_ENABLED: 'true', SUBMISSION_PORT: '0', SUBMISSION_HOST: '127.0.0.1', SUBMISSION_TLS_CERT: join(dir, 'cert.pem'), SUBMISSION_TLS_KEY: join(dir, 'key.pem'), INBOUND_SMTP_PORT: '0', INBOUND_SMTP_HOST: '127.0.0.1' });
    const full = await createMta({ config, log: silentLogger, db: t.db.pool, coord: t.coord, clock: t.clock });
    await full.start({ webhookUrl: undefined });
    try {
      // Two jobs due tomorrow: pending, so the depth is 2 whatever the worker does meanwhile.
      const later = t.clock.now() + 86_400_000;
      await t.mta.context.queue.enqueueMany([1, 2].map((i) => ({ groupKey: `transactional:later${i}.test`, payload: payload({ to: `x@later${i}.test` }), runAt: later })));
      const r = await rawSession(['MAIL FROM:<app@sender.test>', 'RCPT TO:<full@dest.test>', 'DATA', `${message()}\r\n.`], true, full.submission!.starttls.port!);
      expect(r.at(-1)).toMatch(/^452 4\.3\.1/);
    } finally {
      await full.stop();
    }
  });
});

describe('configuration', () => {
  it('enabled without TLS files the MTA refuses to start, naming the variables', async () => {
    const config = loadConfig({ NODE_ENV: 'test', MTA_API_KEY: MASTER, SUBMISSION_ENABLED: 'true', BOUNCE_VERP_KEY: 'x'.repeat(32), BOUNCE_HOST: HOST });
    const err = await createMta({ config, log: silentLogger, db: t.db.pool, coord: t.coord, clock: t.clock }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(String((err as Error).message)).toMatch(/SUBMISSION_TLS_CERT and SUBMISSION_TLS_KEY/);
  });
});

/**
 * A pipelined-free raw session over TLS with the master key, one command per reply: the
 * tests that need exact MAIL parameters or DATA bytes. Returns every reply's last line.
 */
async function rawSession(lines: string[], tls = true, to = port): Promise<string[]> {
  const { connect } = await import('node:tls');
  const net = await import('node:net');
  const plain = net.connect(to, '127.0.0.1');
  const replies: string[] = [];
  let buffer = '';
  let waiting: ((r: string) => void) | null = null;
  const onData = (d: Buffer) => {
    buffer += d.toString('latin1');
    const m = /(?:^|\r\n)(\d{3} [^\r\n]*)\r\n$/.exec(buffer);
    if (m && waiting) {
      buffer = '';
      const w = waiting;
      waiting = null;
      w(m[1]!);
    }
  };
  plain.on('data', onData);
  const next = () => new Promise<string>((resolve) => (waiting = resolve));
  let sock: import('node:net').Socket = plain;
  const say = async (line: string) => {
    const p = next();
    sock.write(`${line}\r\n`);
    return p;
  };
  await next();
  await say('EHLO client.test');
  if (!tls) {
    for (const line of lines) replies.push(await say(line));
    plain.end();
    return replies;
  }
  await say('STARTTLS');
  plain.off('data', onData);
  sock = connect({ socket: plain, ca, servername: HOST });
  sock.on('data', onData);
  await new Promise((r) => sock.once('secureConnect', r));
  await say('EHLO client.test');
  replies.push(await say(`AUTH PLAIN ${Buffer.from(`\0x\0${MASTER}`).toString('base64')}`));
  for (const line of lines) {
    const r = await say(line);
    replies.push(r);
    if (/^[45]/.test(r)) break;
  }
  sock.end();
  return replies;
}
