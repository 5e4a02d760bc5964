/**
 * The new user's path: `npm start` (node dist/cli.js serve) with nothing configured, on an
 * embedded PostgreSQL in a fresh DATA_DIR. Restart reuses data and secrets; SIGTERM leaves
 * no postgres process; kill -9 then start works.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/runtime/embedded-postgres.js';

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'dist/cli.js');

interface Started {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function postgresPidsFor(dataDir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmd.includes('postgres') && cmd.includes(join(dataDir, 'pg'))) pids.push(Number(entry));
    } catch {
      // process ended while we looked
    }
  }
  return pids;
}

async function waitHealthy(url: string, deadlineMs: number): Promise<Response> {
  let last: unknown;
  while (Date.now() < deadlineMs) {
    try {
      const res = await fetch(url);
      if (res.status === 200) return res;
      last = res.status;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`not healthy in time: ${url} (${String(last)})`);
}

describe('npm start on a fresh data directory', () => {
  let dataDir: string;
  let port: number;
  let mtaPort: number;
  let env: NodeJS.ProcessEnv;
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    expect(existsSync(CLI), 'dist/cli.js exists (npm install / npm run build builds it)').toBe(true);
    dataDir = mkdtempSync(join(tmpdir(), 'lm-e2e-start-'));
    port = await freePort();
    mtaPort = await freePort();
    // Only what a new user has: no DATABASE_URL, no REDIS_URL, no secrets.
    // The inbound SMTP listener on any free port: 25 (its default) is shared by other tests' sinks.
    env = { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, PORT: String(port), MTA_PORT: String(mtaPort), INBOUND_SMTP_PORT: '0', LOG_LEVEL: 'warn' };
  });

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    for (const pid of postgresPidsFor(dataDir)) process.kill(pid, 'SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  function start(): Started {
    const child = spawn(process.execPath, [CLI, 'serve'], { env, cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    return { child, output: () => out, exited };
  }

  async function startHealthy(): Promise<Started & { ms: number }> {
    const t0 = Date.now();
    const s = start();
    const deadline = t0 + 30_000;
    const backend = await waitHealthy(`http://127.0.0.1:${port}/api/v1/health`, deadline).catch((e) => {
      throw new Error(`${e.message}\n${s.output()}`);
    });
    expect(((await backend.json()) as any).data.status).toBe('ok');
    const mta = await waitHealthy(`http://127.0.0.1:${mtaPort}/health`, deadline);
    const body = (await mta.json()) as any;
    expect(body.data.queue.depth).toBe(0);
    // The servers answer as soon as they listen; the URLs are printed once both roles have
    // started their workers, a moment later.
    while (!s.output().includes('Inbound SMTP')) {
      if (Date.now() > deadline) throw new Error(`no start-up announcement in time:\n${s.output()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return { ...s, ms: Date.now() - t0 };
  }

  it('answers both health checks within 30 s, prints URLs and the generated secrets once', async () => {
    const s = await startHealthy();
    expect(s.ms).toBeLessThan(30_000);
    const out = s.output();
    expect(out).toContain(`http://localhost:${port}`);
    expect(out).toContain(`http://localhost:${mtaPort}`);
    // The inbound SMTP door is announced with the port it really bound (INBOUND_SMTP_PORT=0 here).
    const smtpPort = Number(/Inbound SMTP +localhost:(\d+) /.exec(out)?.[1]);
    expect(smtpPort).toBeGreaterThan(0);
    const greeting = await new Promise<string>((res, rej) => {
      const sock = connect(smtpPort, '127.0.0.1');
      sock.once('data', (d) => (res(d.toString()), sock.destroy()));
      sock.once('error', rej);
    });
    expect(greeting).toMatch(/^220 /);
    const secrets = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')).secrets;
    for (const name of ['ADMIN_TOKEN', 'MTA_API_KEY', 'MTA_WEBHOOK_SECRET', 'BOUNCE_VERP_KEY']) {
      expect(out).toContain(`${name}=${secrets[name]}`);
    }
    // Leave a marker to prove the next start reuses the data.
    const pgPort = readFileSync(join(dataDir, 'pg.port'), 'utf8');
    const pw = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')).postgresPassword;
    const c = new pg.Client({ connectionString: `postgres://postgres:${encodeURIComponent(pw)}@127.0.0.1:${pgPort}/lettermill` });
    await c.connect();
    await c.query(`INSERT INTO lm_meta (key, value) VALUES ('e2e-marker', '"kept"')`);
    await c.end();

    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
    expect(postgresPidsFor(dataDir)).toEqual([]);
  }, 60_000);

  it('a second start reuses data and secrets and prints no secret', async () => {
    const before = readFileSync(join(dataDir, 'secrets.json'), 'utf8');
    const s = await startHealthy();
    expect(readFileSync(join(dataDir, 'secrets.json'), 'utf8')).toBe(before);
    expect(s.output()).not.toContain('ADMIN_TOKEN=');
    const pgPort = readFileSync(join(dataDir, 'pg.port'), 'utf8');
    const pw = JSON.parse(before).postgresPassword;
    const c = new pg.Client({ connectionString: `postgres://postgres:${encodeURIComponent(pw)}@127.0.0.1:${pgPort}/lettermill` });
    await c.connect();
    const marker = await c.query(`SELECT value FROM lm_meta WHERE key = 'e2e-marker'`);
    await c.end();
    expect(marker.rows[0]?.value).toBe('kept');
    s.child.kill('SIGINT');
    expect(await s.exited).toBe(0);
    expect(postgresPidsFor(dataDir)).toEqual([]);
  }, 60_000);

  it('after kill -9 the next start works and SIGTERM then leaves nothing behind', async () => {
    const first = await startHealthy();
    first.child.kill('SIGKILL');
    await first.exited;
    expect(postgresPidsFor(dataDir).length).toBeGreaterThan(0); // the orphan is really there
    const second = await startHealthy();
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    expect(postgresPidsFor(dataDir)).toEqual([]);
  }, 90_000);

  it('a second start while the first runs refuses, names the first, and leaves it running', async () => {
    const first = await startHealthy();
    const second = start();
    expect(await second.exited).not.toBe(0);
    expect(second.output()).toContain(`is in use by another Lettermill (pid ${first.child.pid})`);
    // The first one's store was not stopped under it.
    const health = await fetch(`http://127.0.0.1:${port}/api/v1/health`);
    expect(health.status).toBe(200);
    expect(((await health.json()) as any).data.store).toBe('ok');
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    expect(postgresPidsFor(dataDir)).toEqual([]);
    expect(existsSync(join(dataDir, 'pg.owner'))).toBe(false);
  }, 90_000);

  it('a bad configuration value names the variable and exits non-zero', async () => {
    const child = spawn(process.execPath, [CLI, 'serve'], { env: { ...env, PORT: 'eighty' }, cwd: ROOT });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((r) => child.on('exit', r));
    expect(code).not.toBe(0);
    expect(err).toContain('PORT must be a TCP port number');
  });
});
