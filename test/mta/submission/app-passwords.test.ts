/**
 * App passwords in the real product (role all): the admin creates one (shown once), the MTA
 * verifies it with the backend's signed `POST /webhooks/mta-verify-credential` at AUTH, its
 * sender limits hold at MAIL, and once revoked the next AUTH fails.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { createTestCa } from '../../harness/tls.js';

const KEY = 'lm_mta_apw_0123456789abcdefghijklmnopqrstuvwxyz';
const ADMIN = 'lm_admin_apw_0123456789abcdefghijklmnopqrstuvwxyz';
const HOST = 'submit.sender.test';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
let app: TestApp;
let dir: string;
let port: number;

beforeAll(async () => {
  const certs = await createTestCa({ dnsNames: [HOST], ips: ['127.0.0.1'] });
  dir = mkdtempSync(join(tmpdir(), 'lm-apw-'));
  writeFileSync(join(dir, 'cert.pem'), certs.chain);
  writeFileSync(join(dir, 'key.pem'), certs.key);
  app = await startTestApp({
    role: 'all',
    env: {
      ADMIN_TOKEN: ADMIN,
      MTA_API_KEY: KEY,
      BOUNCE_VERP_KEY: 'apw-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.test',
      SUBMISSION_ENABLED: 'true',
      SUBMISSION_PORT: '0',
      SUBMISSION_HOST: '127.0.0.1',
      SUBMISSION_TLS_CERT: join(dir, 'cert.pem'),
      SUBMISSION_TLS_KEY: join(dir, 'key.pem'),
    },
  });
  port = app.mta!.submission!.starttls.port!;
  const mta = bearerApi(() => app.mtaUrl!, KEY);
  for (const domain of ['sender.test', 'other.test']) expect((await mta('POST', '/dkim', { domain, selector: 's1', privateKey: rsaPem })).status).toBeLessThan(300);
}, 120_000);

afterAll(async () => {
  await app?.close();
  rmSync(dir, { recursive: true, force: true });
});

const swaks = (args: string[]) =>
  new Promise<string>((resolve) => {
    const child = execFile('swaks', ['--server', '127.0.0.1', '--port', String(port), '--helo', 'client.test', '--timeout', '20', '--tls', ...args], { timeout: 30_000 }, (_err, stdout, stderr) => resolve(`${stdout}${stderr}`));
    child.stdin?.end();
  });

it('created, used, limited to its senders, listed without the password, and refused at once after revocation', async () => {
  const admin = bearerApi(() => app.backendUrl!, ADMIN);
  const created = await admin('POST', '/admin/app-passwords', { name: 'WordPress', senders: ['sender.test'] });
  expect(created.status).toBe(201);
  const { id, password } = created.body.data as { id: string; password: string };
  expect(password).toMatch(/^lm_app_/);
  const auth = ['--auth', 'LOGIN', '--auth-user', 'wordpress', '--auth-password', password];

  const ok = await swaks([...auth, '--from', 'blog@sender.test', '--to', 'reader@dest.test', '--body', 'hello', '--h-From', 'blog@sender.test']);
  expect(ok).toMatch(/<~\s+250 2\.0\.0 Queued as \d+/);
  const outside = await swaks([...auth, '--from', 'blog@other.test', '--to', 'reader@dest.test', '--quit-after', 'MAIL']);
  expect(outside).toMatch(/<~\*+\s+550 5\.7\.1 This credential may not send as blog@other\.test/);

  const listed = await admin('GET', '/admin/app-passwords');
  expect(listed.body.data).toEqual([expect.objectContaining({ id, name: 'WordPress', senders: ['sender.test'], revokedAt: null })]);
  expect(JSON.stringify(listed.body)).not.toContain(password);

  expect((await admin('DELETE', `/admin/app-passwords/${id}`)).status).toBe(200);
  const revoked = await swaks([...auth, '--quit-after', 'AUTH']);
  expect(revoked).toMatch(/<~\*+\s+535 5\.7\.8/);
});

it('the verification endpoint refuses an unsigned request', async () => {
  const res = await fetch(`${app.backendUrl}/webhooks/mta-verify-credential`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ password: 'lm_app_x', purpose: 'submission' }) });
  expect(res.status).toBe(401);
  expect(((await res.json()) as { error: { category: string } }).error.category).toBe("unauthenticated");
});
