/**
 * Issue 15: a checkout in a directory only its owner can enter (root's home, any `mktemp -d`),
 * run as root with nothing configured. PostgreSQL runs as the postgres user, which can enter
 * neither the checkout's node_modules (the binaries) nor its default DATA_DIR: `npm start` must
 * still become healthy and stop cleanly, and a test file must pass from there. The copy's
 * node_modules are hard links: the same files under a path that user cannot enter.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/runtime/embedded-postgres.js';
import { blockedAt, postgresAccount, SYSTEM_DIR } from '../../src/runtime/postgres-user.js';

const ROOT = resolve(import.meta.dirname, '../..');
const isRoot = process.getuid?.() === 0;

interface Run {
  child: ChildProcess;
  out: () => string;
  exited: Promise<number | null>;
}

function run(cmd: string, args: string[], cwd: string, env: Record<string, string>): Run {
  // Its own process group, so that SIGTERM reaches npm and the server as a terminal's Ctrl+C would.
  const child = spawn(cmd, args, { cwd, env: { PATH: process.env.PATH!, HOME: process.env.HOME!, ...env }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  return { child, out: () => out, exited: new Promise((r) => child.on('close', (code) => r(code))) };
}

async function waitHealthy(url: string, deadline: number, s: Run): Promise<void> {
  let ended = false;
  void s.exited.then(() => (ended = true));
  while (Date.now() < deadline && !ended) {
    const status = await fetch(url).then((r) => r.status, () => 0);
    if (status === 200) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`not healthy${ended ? ' (it exited)' : ' in time'}: ${url}\n${s.out()}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe.skipIf(!isRoot)(`a checkout in a 0700 directory, as root${isRoot ? '' : ' (skipped: only root runs PostgreSQL as another user)'}`, () => {
  let home: string;
  let app: string;
  const groups: number[] = [];

  beforeAll(() => {
    home = mkdtempSync(join(tmpdir(), 'lm-private-'));
    expect(statSync(home).mode & 0o077).toBe(0);
    app = join(home, 'app');
    mkdirSync(app);
    for (const f of ['package.json', 'tsconfig.json', 'vitest.config.ts', 'dist', 'src', 'test']) cpSync(join(ROOT, f), join(app, f), { recursive: true });
    try {
      execFileSync('cp', ['-al', join(ROOT, 'node_modules'), join(app, 'node_modules')]);
    } catch {
      execFileSync('cp', ['-a', join(ROOT, 'node_modules'), join(app, 'node_modules')]); // another file system
    }
    rmSync(join(app, 'node_modules/.vite'), { recursive: true, force: true }); // vitest's cache: not shared with ROOT
    // The situation of the issue, not an accident of this machine:
    expect(blockedAt(join(app, 'node_modules'), postgresAccount())).toBe(home);
  }, 60_000);

  afterAll(async () => {
    for (const pgid of groups) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    // Clusters this test made under SYSTEM_DIR (each names its DATA_DIR); the binaries' copy
    // is shared by every checkout of this version and stays.
    for (const entry of existsSync(SYSTEM_DIR) ? readdirSync(SYSTEM_DIR) : []) {
      const owner = join(SYSTEM_DIR, entry, 'DATA_DIR');
      if (!existsSync(owner) || !readFileSync(owner, 'utf8').startsWith(home)) continue;
      const pidFile = join(SYSTEM_DIR, entry, 'pg', 'postmaster.pid');
      const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').split('\n')[0]) : 0;
      if (pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
      rmSync(join(SYSTEM_DIR, entry), { recursive: true, force: true });
    }
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('npm start becomes healthy, says where the cluster is, stops cleanly, and starts again on the same data', async () => {
    const port = await freePort();
    const mtaPort = await freePort();
    let cluster = '';
    for (const round of [1, 2]) {
      // INBOUND_SMTP_PORT=0: port 25 (the default) is shared by other tests' sinks.
      const s = run('npm', ['start'], app, { PORT: String(port), MTA_PORT: String(mtaPort), INBOUND_SMTP_PORT: '0' });
      groups.push(s.child.pid!);
      const deadline = Date.now() + 45_000;
      await waitHealthy(`http://127.0.0.1:${port}/api/v1/health`, deadline, s);
      await waitHealthy(`http://127.0.0.1:${mtaPort}/health`, deadline, s);

      const link = join(app, 'data', 'pg');
      if (round === 1) cluster = readlinkSync(link);
      expect(readlinkSync(link)).toBe(cluster); // the second start finds the same cluster
      expect(dirname(dirname(cluster))).toBe(SYSTEM_DIR);
      expect(s.out()).toContain(`the PostgreSQL cluster of ${join(app, 'data')} is in ${cluster}`);

      // The server runs as the postgres user, from binaries under SYSTEM_DIR.
      const pid = Number(readFileSync(join(cluster, 'postmaster.pid'), 'utf8').split('\n')[0]);
      expect(realpathSync(`/proc/${pid}/exe`).startsWith(`${SYSTEM_DIR}/pg-`)).toBe(true);
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
      expect(uid).toBe(postgresAccount().uid);

      // SIGTERM to the server, as a service manager sends it; npm then exits with its code.
      const serve = Number(execFileSync('pgrep', ['-g', String(s.child.pid), '-f', '^node .*dist/cli.js serve'], { encoding: 'utf8' }).trim());
      process.kill(serve, 'SIGTERM');
      expect(await s.exited, s.out()).toBe(0);
      expect(alive(pid)).toBe(false);
    }
  }, 120_000);

  it('an explicit DATA_DIR the postgres user cannot enter stays an error that says what to do', async () => {
    const dataDir = join(home, 'chosen');
    const s = run(process.execPath, ['dist/cli.js', 'serve'], app, { DATA_DIR: dataDir, PORT: String(await freePort()), MTA_PORT: String(await freePort()), INBOUND_SMTP_PORT: '0' });
    groups.push(s.child.pid!);
    expect(await s.exited).not.toBe(0);
    expect(s.out()).toContain(`DATA_DIR ${dataDir} is inside ${home}, which the postgres user cannot enter`);
    expect(s.out()).toContain('leave DATA_DIR unset');
    expect(existsSync(join(dataDir, 'pg'))).toBe(false);
  }, 30_000);

  it('a test file passes from there', async () => {
    const s = run(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', 'test/shared/migrate.test.ts'], app, {});
    groups.push(s.child.pid!);
    const code = await s.exited;
    expect(code, s.out()).toBe(0);
    // Some tests ran and passed, none failed (the count follows that file's own tests). With
    // CI=true vitest colours its summary: the codes are stripped first.
    // eslint-disable-next-line no-control-regex
    const summary = s.out().replace(/\x1b\[[0-9;]*m/g, '');
    expect(summary).toMatch(/Tests\s+[1-9]\d* passed/);
    expect(summary).not.toMatch(/\d+ failed/);
  }, 90_000);
});
