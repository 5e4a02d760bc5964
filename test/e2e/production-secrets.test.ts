/**
 * `NODE_ENV=production` and BOUNCE_VERP_KEY, through the real CLI (`dist/cli.js serve`): a role
 * that sends (all, mta) refuses to start without a key or with a placeholder, naming the
 * variable and never printing the value; a backend-only instance never reads the key (the MTA
 * alone signs VERP return paths and CFBL ids and verifies them in reports), so it starts without.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/runtime/embedded-postgres.js';
import { createTestDatabase, type TestDatabase } from '../harness/db.js';

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/cli.js');

let dataDir: string;
beforeAll(() => {
  expect(existsSync(CLI), 'dist/cli.js exists (npm run build)').toBe(true);
  dataDir = mkdtempSync(join(tmpdir(), 'lm-e2e-prod-secrets-'));
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

function serve(role: string, env: Record<string, string>) {
  const child = spawn(process.execPath, [CLI, 'serve', '--role', role], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, NODE_ENV: 'production', DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...env },
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { child, exited, output: () => out };
}

describe('production refuses a role that signs tokens without a real BOUNCE_VERP_KEY', () => {
  // What the code treats as a placeholder (runtime/secrets.ts): a known word, shorter than 16, all x or 0, 1234…
  const placeholders = ['changeme', 'your-verp-key', 'short-key-15chr', 'x'.repeat(32), '0'.repeat(20), '1234567890abcdefghij'];
  for (const role of ['all', 'mta']) {
    it(`--role ${role}: missing → exit 78 naming BOUNCE_VERP_KEY, before any store starts`, async () => {
      const s = serve(role, {});
      expect(await s.exited).toBe(78);
      expect(s.output()).toContain('BOUNCE_VERP_KEY is required in production');
      expect(existsSync(join(dataDir, 'pg'))).toBe(false);
    });

    it(`--role ${role}: each placeholder → exit 78 naming the variable, not the value`, async () => {
      for (const value of placeholders) {
        const s = serve(role, { BOUNCE_VERP_KEY: value });
        expect(await s.exited, value).toBe(78);
        expect(s.output(), value).toContain('BOUNCE_VERP_KEY is a placeholder value');
        expect(s.output(), value).not.toContain(value);
      }
      expect(existsSync(join(dataDir, 'pg'))).toBe(false);
    });
  }
});

describe('a backend-only instance in production starts without BOUNCE_VERP_KEY', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => db?.drop());

  for (const [what, extra] of [['unset', {}], ['a placeholder (unread)', { BOUNCE_VERP_KEY: 'changeme' }]] as const) {
    it(`BOUNCE_VERP_KEY ${what}: healthy, then SIGTERM exits 0`, async () => {
      const port = await freePort();
      const s = serve('backend', {
        DATABASE_URL: db.url,
        PORT: String(port),
        HOST: '127.0.0.1',
        BASE_URL: 'https://lettermill.test',
        ADMIN_TOKEN: 'lm_admin_prod_secrets_0123456789abcdefghij',
        MTA_API_KEY: 'lm_mta_prod_secrets_0123456789abcdefghijkl',
        MTA_WEBHOOK_SECRET: 'prod-secrets-webhook-0123456789abcdef',
        ...extra,
      });
      const deadline = Date.now() + 30_000;
      let status = 0;
      while (Date.now() < deadline && s.child.exitCode === null) {
        status = await fetch(`http://127.0.0.1:${port}/api/v1/health`).then((r) => r.status, () => 0);
        if (status === 200) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(status, s.output()).toBe(200);
      expect(s.output()).not.toContain('BOUNCE_VERP_KEY');
      s.child.kill('SIGTERM');
      expect(await s.exited).toBe(0);
    }, 60_000);
  }
});
