/** The whole app in-process on ephemeral ports against a fresh database. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLettermill, type Running } from '../../src/runtime/boot.js';
import type { Clock } from '../../src/shared/clock.js';
import type { Role } from '../../src/shared/config.js';
import { createTestDatabase, type TestDatabase } from './db.js';

export interface TestApp extends Running {
  db: TestDatabase;
  dataDir: string;
  close(): Promise<void>;
}

export async function startTestApp(opts: { env?: Record<string, string>; role?: Role; clock?: Clock; db?: TestDatabase } = {}): Promise<TestApp> {
  const db = opts.db ?? (await createTestDatabase());
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-test-app-'));
  const env: Record<string, string> = {
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.LM_TEST_LOG_LEVEL ?? 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
    MTA_PORT: '0',
    INBOUND_SMTP_PORT: '0',
    INBOUND_SMTP_HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    DATABASE_URL: db.url,
    ...opts.env,
  };
  let running: Running;
  try {
    running = await startLettermill({ env, role: opts.role ?? 'all', clock: opts.clock, announce: () => {} });
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    if (!opts.db) await db.drop();
    throw err;
  }
  // Tests that stop an app (the SIGTERM path) rather than close it leave no data directory
  // (it holds generated secrets) behind either; each start has a directory of its own.
  const stopRunning = running.stop.bind(running);
  const stop = async () => {
    await stopRunning();
    rmSync(dataDir, { recursive: true, force: true });
  };
  return Object.assign(running, {
    db,
    dataDir,
    stop,
    async close() {
      await stop();
      if (!opts.db) await db.drop();
    },
  });
}

/** A JSON call with a Bearer key to a base URL returned by `base()` (read per call: the app starts later). */
export function bearerApi(base: () => string, key: string) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${base()}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: (await res.json()) as any };
  };
}
