/**
 * Issue 15: a failing global set-up of the test run must print its cause. It used to end with
 * code 1 after vitest's banner and nothing else when the failure was an uncaught exception.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';
import { freePort } from '../../src/runtime/embedded-postgres.js';

const ROOT = resolve(import.meta.dirname, '../..');
const VITEST = resolve(ROOT, 'node_modules/vitest/vitest.mjs');

/** A separate vitest run, with only what a developer's shell has (not this run's VITEST_* variables). */
function vitest(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, [VITEST, 'run', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  return new Promise((ok) => child.on('close', (code) => ok({ code, out })));
}

it('a set-up that cannot reach its PostgreSQL names the address it tried', async () => {
  const closed = await freePort();
  const r = await vitest(['test/shared/batch.test.ts'], { LM_TEST_DATABASE_URL: `postgres://postgres@127.0.0.1:${closed}/postgres` });
  expect(r.code).not.toBe(0);
  expect(r.out).toContain('global set-up failed: Error: connect ECONNREFUSED');
  expect(r.out).toContain(`127.0.0.1:${closed}`);
}, 60_000);

it('a set-up ended by an uncaught exception (a failed spawn nobody listened to) prints it', async () => {
  const r = await vitest(['--config', 'test/fixtures/setup-failure/vitest.config.ts']);
  expect(r.code).not.toBe(0);
  expect(r.out).toContain('global set-up failed: Error: spawn /nonexistent/lettermill-fixture/initdb ENOENT');
}, 60_000);
