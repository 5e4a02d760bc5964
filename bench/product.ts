/**
 * The product as `npm start` runs it, for benchmarks: a child process started with the same
 * node flags as package.json's `start` script (`dist/cli.js serve --role <role>`), so a
 * benchmark measures what an operator runs, its CPU is counted apart from the load
 * generator's, and the generator does not share its event loop. Needs `npm run build`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import pg from 'pg';
import { withDatabase } from '../src/shared/db/pool.js';
import { cpuMeter, processCpuMs, redisCpuMs } from './cpu.js';
import { createWriteStream, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Node's flags from the `start` script (`node <flags> dist/cli.js serve`). */
export function startScriptNodeFlags(root = ROOT): string[] {
  const start: string = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts.start;
  const words = start.split(/\s+/);
  if (words[0] !== 'node' || !words.includes('dist/cli.js')) throw new Error(`unexpected start script: ${start}`);
  return words.slice(1, words.indexOf('dist/cli.js'));
}

export interface Product {
  pid: number;
  mtaUrl?: string;
  backendUrl?: string;
  /** CPU ms used by the process so far (all its threads), from /proc: total and kernel (system) part. */
  cpuMs(): { total: number; system: number };
  stop(): Promise<void>;
}

function procCpuMs(pid: number): { total: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime in USER_HZ (100) ticks.
  return { total: (Number(f[11]) + Number(f[12])) * 10, system: Number(f[12]) * 10 };
}

/** `root`: a checkout with its own build (dist/) and node_modules, e.g. an older commit (BENCH_OLD_ROOT); default this one. */
export async function startProduct(o: { role: 'all' | 'mta' | 'backend'; env: Record<string, string>; root?: string }): Promise<Product> {
  const root = o.root ?? ROOT;
  // BENCH_PROFILE_DIR: a V8 CPU profile of the product, written when it stops.
  const profile = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
  // BENCH_PRODUCT_NODE_FLAGS: node/V8 flags NODE_OPTIONS refuses (e.g. --trace-deopt).
  const flags = (process.env.BENCH_PRODUCT_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const child: ChildProcess = spawn(process.execPath, [...startScriptNodeFlags(root), ...flags, ...profile, join(root, 'dist/cli.js'), 'serve', '--role', o.role], {
    cwd: root,
    // BENCH_PRODUCT_NODE_OPTIONS: extra node flags for the product (e.g. --perf-basic-prof for perf).
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NODE_OPTIONS: process.env.BENCH_PRODUCT_NODE_OPTIONS ?? '', ...o.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  // BENCH_PRODUCT_LOG: a file that receives the product's whole output (e.g. with --trace-deopt).
  const log = process.env.BENCH_PRODUCT_LOG ? createWriteStream(process.env.BENCH_PRODUCT_LOG, { flags: 'a' }) : null;
  const take = (c: Buffer) => {
    log?.write(c);
    if (out.length < 1 << 20) out += c.toString(); // enough for the start-up lines
  };
  child.stdout!.on('data', take);
  child.stderr!.on('data', take);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const want = (o.role === 'all' ? ['backend', 'MTA'] : o.role === 'mta' ? ['MTA'] : ['backend']).map((w) => new RegExp(`Lettermill ${w}\\s+(http://\\S+)`));
  const deadline = Date.now() + 60_000;
  while (!want.every((re) => re.test(out))) {
    if (child.exitCode !== null) {
      await new Promise((r) => setTimeout(r, 100)); // the last output may still be in the pipe
      throw new Error(`the product exited with ${child.exitCode}:\n${out}`);
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the product did not start in 60 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const url = (w: string) => out.match(new RegExp(`Lettermill ${w}\\s+(http://\\S+)`))?.[1];
  return {
    pid: child.pid!,
    mtaUrl: url('MTA'),
    backendUrl: url('backend'),
    cpuMs: () => procCpuMs(child.pid!),
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Runs one statement on the server's `postgres` database (CREATE / DROP DATABASE). */
async function admin(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: withDatabase(url, 'postgres') });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

/**
 * A database of its own on the bench's server, for one run: the rows, dead tuples and
 * autovacuum work of an earlier run must not be counted in the next one.
 */
export async function scratchDatabase(serverUrl: string, prefix: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `${prefix}_${process.pid}_${Date.now()}`;
  await admin(serverUrl, `CREATE DATABASE ${name}`);
  return { url: withDatabase(serverUrl, name), drop: () => admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {}) };
}

/** CPU per unit of work: the product's process (and its kernel part), PostgreSQL's, the generator's (this process), and when measured the sink's and Redis's. */
export interface CpuPerUnit {
  processMs: number;
  processSystemMs: number;
  postgresMs: number | null;
  /** PostgreSQL's by process kind: backends, autovacuum worker, walwriter, checkpointer, exited… */
  postgresByKind: Record<string, number> | null;
  generatorMs: number;
  /** The SMTP sink's process (null: not measured). */
  sinkMs: number | null;
  /** The Redis server of the product's coordination (null: none, or not measured). */
  redisMs: number | null;
}

export interface CpuMeterTargets {
  /** The embedded PostgreSQL's data directory. */
  pgDir?: string;
  /** The sink's process id. */
  sinkPid?: number;
  /** The Redis server's URL (its INFO cpu). */
  redisUrl?: string;
}

/** Starts measuring CPU of the product, this process and the targets given; `stop(n)` divides by n units. */
export async function productCpuMeter(product: Product, t: CpuMeterTargets = {}): Promise<{ stop(n: number): Promise<CpuPerUnit> }> {
  const redis0 = await redisCpuMs(t.redisUrl);
  const sink0 = processCpuMs(t.sinkPid);
  const meter = cpuMeter(t.pgDir);
  const p0 = product.cpuMs();
  const delta = (a: number | null, b: number | null, n: number) => (a === null || b === null ? null : (b - a) / n);
  return {
    async stop(n) {
      const p1 = product.cpuMs();
      const c = meter.stop();
      const sink1 = processCpuMs(t.sinkPid);
      const redis1 = await redisCpuMs(t.redisUrl);
      return {
        processMs: (p1.total - p0.total) / n,
        processSystemMs: (p1.system - p0.system) / n,
        postgresMs: c.postgresMs === null ? null : c.postgresMs / n,
        postgresByKind: c.postgresByKind === null ? null : Object.fromEntries(Object.entries(c.postgresByKind).map(([k, ms]) => [k, ms / n])),
        generatorMs: c.processMs / n,
        sinkMs: delta(sink0, sink1, n),
        redisMs: delta(redis0, redis1, n),
      };
    },
  };
}
