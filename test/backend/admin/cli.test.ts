/** `lettermill users create` against a real database, then a login with that user. */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../harness/db.js';
import { call, type Backend } from '../public/helpers.js';

const ROOT = resolve(__dirname, '../../..');

function cli(db: TestDatabase, dataDir: string, args: string[], stdin: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'users', ...args], {
      cwd: ROOT,
      // Only what the command reads: the test runner's environment is not the operator's.
      env: { PATH: process.env.PATH, HOME: process.env.HOME, NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: db.url, DATA_DIR: dataDir },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('close', (code) => done({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

describe('lettermill users create', () => {
  let db: TestDatabase;
  let dataDir: string;
  let b: Backend | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'lm-users-cli-'));
  });
  afterAll(async () => {
    await b?.app.stop();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('creates users with the password from stdin or --password; refuses bad input', async () => {
    const made = await cli(db, dataDir, ['create', '--email', 'ops@acme.example', '--role', 'editor'], 'a long enough password\n');
    expect(made.stderr).toBe('');
    expect(made).toMatchObject({ code: 0 });
    expect(made.stdout).toMatch(/^created editor ops@acme\.example \(usr_[0-9a-z]{26}\)\n$/);
    const dup = await cli(db, dataDir, ['create', '--email', 'OPS@acme.example', '--password', 'another long password'], '');
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain('exists');
    const weak = await cli(db, dataDir, ['create', '--email', 'x@acme.example', '--password', 'short'], '');
    expect(weak.code).toBe(1);
    const role = await cli(db, dataDir, ['create', '--email', 'x@acme.example', '--role', 'root', '--password', 'a long enough password'], '');
    expect(role.code).toBe(1);
    expect((await db.pool.query(`SELECT email, role FROM admin_users`)).rows).toEqual([{ email: 'ops@acme.example', role: 'editor' }]);

    // The user logs in to a backend on the same database; setup is no longer needed.
    const { startTestApp } = await import('../../harness/app.js');
    const app = await startTestApp({ db, role: 'backend' });
    b = { app, url: app.backendUrl!, events: [], close: () => app.close() };
    expect((await call(b.url, 'GET', '/admin/setup')).body.data.needed).toBe(false);
    const s = await call(b.url, 'POST', '/admin/session', { json: { email: 'ops@acme.example', password: 'a long enough password' } });
    expect(s.status).toBe(200);
    expect(s.body.data.user.role).toBe('editor');
  }, 90_000);
});
