/**
 * CPU accounting for benchmarks on Linux: this process (event loop and thread pool), a
 * PostgreSQL server's processes (postmaster and its children, found through postmaster.pid,
 * by kind, with the children it has reaped), one process (the sink), a process tree (a peer
 * MTA) and a Redis server (INFO cpu), so a figure can say where the CPU time per message went.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const TICK_MS = 10; // USER_HZ is 100 on Linux.

interface ProcTimes {
  ppid: number;
  /** Its own CPU ms. */
  ms: number;
  /** CPU ms of the children it has reaped. */
  reapedMs: number;
}

/** One process's times (null when it has ended or cannot be read). */
function statOf(pid: number): ProcTimes | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may contain spaces) start at state: ppid is 2nd, utime
    // 12th, stime 13th, cutime 14th, cstime 15th.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * TICK_MS, reapedMs: (Number(f[13]) + Number(f[14])) * TICK_MS };
  } catch {
    return null;
  }
}

function procTimes(): Map<number, ProcTimes> {
  const out = new Map<number, ProcTimes>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const t = statOf(Number(name));
    if (t) out.set(Number(name), t);
  }
  return out;
}

/** CPU ms of one process so far (null when it has ended or cannot be read). */
export function processCpuMs(pid: number | undefined): number | null {
  return pid ? (statOf(pid)?.ms ?? null) : null;
}

/** CPU ms of a Redis server so far (INFO cpu: used_cpu_user + used_cpu_sys), null when it does not answer. */
export async function redisCpuMs(url: string | undefined): Promise<number | null> {
  if (!url) return null;
  const { Redis } = await import('ioredis');
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await r.connect();
    const info = await r.info('cpu');
    const field = (name: string) => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1] ?? NaN);
    const s = field('used_cpu_user') + field('used_cpu_sys');
    return Number.isFinite(s) ? s * 1000 : null;
  } catch {
    return null;
  } finally {
    r.disconnect();
  }
}

/**
 * CPU ms so far of the process trees under `roots`: each live process's own time plus what
 * the children it has reaped used (a Postfix daemon that exited is in its master's), so
 * processes that come and go during a run are counted. Null when no root is alive.
 */
export function treeCpuMs(roots: readonly (number | undefined)[]): number | null {
  const all = procTimes();
  const inTree = new Set<number>(roots.filter((r): r is number => r !== undefined && all.has(r)));
  if (inTree.size === 0) return null;
  // Parents before children is not guaranteed by pid order: repeat until no process joins.
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, p] of all) {
      if (inTree.has(pid) || !inTree.has(p.ppid)) continue;
      inTree.add(pid);
      grew = true;
    }
  }
  let ms = 0;
  for (const pid of inTree) ms += all.get(pid)!.ms + all.get(pid)!.reapedMs;
  return ms;
}

/** CPU ms of the children this process has reaped (the smtp-source runs that fed a peer). */
export function reapedChildrenCpuMs(): number {
  return statOf(process.pid)?.reapedMs ?? 0;
}

/** CPU per message of a peer MTA: its processes, the smtp-source runs that fed it, the sink. */
export interface PeerCpu {
  peerMs: number | null;
  generatorMs: number;
  sinkMs: number | null;
}

/** Starts measuring a peer (its root processes) with its generator and sink; `stop(n)` divides by n messages. */
export function peerCpuMeter(roots: readonly (number | undefined)[], sinkPid: number | undefined): { stop(n: number): PeerCpu } {
  const peer0 = treeCpuMs(roots);
  const gen0 = reapedChildrenCpuMs();
  const sink0 = processCpuMs(sinkPid);
  return {
    stop(n) {
      const peer1 = treeCpuMs(roots);
      const sink1 = processCpuMs(sinkPid);
      return {
        peerMs: peer0 === null || peer1 === null ? null : (peer1 - peer0) / n,
        generatorMs: (reapedChildrenCpuMs() - gen0) / n,
        sinkMs: sink0 === null || sink1 === null ? null : (sink1 - sink0) / n,
      };
    },
  };
}

/** One PostgreSQL process: its kind and its own CPU ms so far. */
interface PostgresProcess {
  kind: string;
  ms: number;
}

/** The postmaster and what it forked, by the title each sets (`postgres: walwriter`, `postgres: user db host idle`). */
function postgresKind(pid: number, master: number): string {
  if (pid === master) return 'postmaster';
  try {
    const title = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    const m = /^postgres: (checkpointer|background writer|walwriter|autovacuum launcher|autovacuum worker|logical replication launcher|archiver|startup|walsender)/.exec(title);
    return m ? m[1]! : 'backends';
  } catch {
    return 'backends';
  }
}

/**
 * The processes of the PostgreSQL server whose data directory is `pgDir` (null when not
 * readable), and the CPU ms of the children its postmaster has reaped: autovacuum workers
 * live seconds, and their time is only there once they have exited.
 */
function postgresProcesses(pgDir: string | undefined): { processes: Map<number, PostgresProcess>; reapedMs: number } | null {
  if (!pgDir) return null;
  let master: number;
  try {
    master = Number(readFileSync(join(pgDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return null;
  }
  const processes = new Map<number, PostgresProcess>();
  let reapedMs = 0;
  for (const [pid, p] of procTimes()) {
    if (pid === master) reapedMs = p.reapedMs;
    if (pid === master || p.ppid === master) processes.set(pid, { kind: postgresKind(pid, master), ms: p.ms });
  }
  return processes.size === 0 ? null : { processes, reapedMs };
}

/**
 * CPU ms so far of a PostgreSQL server: its processes and those that have exited (null when
 * not readable). It only grows, so a difference of two readings is exact.
 */
export function postgresCpuMs(pgDir: string | undefined): number | null {
  const pg = postgresProcesses(pgDir);
  if (!pg) return null;
  let ms = pg.reapedMs;
  for (const p of pg.processes.values()) ms += p.ms;
  return ms;
}

/** CPU ms of PostgreSQL between two readings, by process kind; processes that exited meanwhile are "exited". */
function postgresDelta(
  a: NonNullable<ReturnType<typeof postgresProcesses>>,
  b: NonNullable<ReturnType<typeof postgresProcesses>>,
): { total: number; byKind: Record<string, number> } {
  const byKind: Record<string, number> = {};
  let total = 0;
  for (const [pid, p] of b.processes) {
    const ms = p.ms - (a.processes.get(pid)?.ms ?? 0);
    byKind[p.kind] = (byKind[p.kind] ?? 0) + ms;
    total += ms;
  }
  // What the exited used after the first reading: all their time, less what that reading counted.
  let exited = b.reapedMs - a.reapedMs;
  for (const [pid, p] of a.processes) if (!b.processes.has(pid)) exited -= p.ms;
  if (exited !== 0) byKind.exited = exited;
  return { total: total + exited, byKind };
}

/** Starts a measurement; `stop()` gives CPU ms of this process and of PostgreSQL (in all and by process kind) since. */
export function cpuMeter(pgDir: string | undefined): {
  stop(): { processMs: number; postgresMs: number | null; postgresByKind: Record<string, number> | null };
} {
  const p0 = process.cpuUsage();
  const pg0 = postgresProcesses(pgDir);
  return {
    stop() {
      const p = process.cpuUsage(p0);
      const pg1 = postgresProcesses(pgDir);
      const pg = pg0 && pg1 ? postgresDelta(pg0, pg1) : null;
      return { processMs: (p.user + p.system) / 1000, postgresMs: pg?.total ?? null, postgresByKind: pg?.byKind ?? null };
    },
  };
}
