/**
 * CPU accounting for benchmarks on Linux: this process (event loop and thread pool) and a
 * PostgreSQL server's processes (postmaster and its children, found through postmaster.pid),
 * so a figure can say where the CPU time per message went. Backends that exit during the
 * interval are missed (their time since the start is lost); the benchmarks keep pooled
 * connections open, so that is rare.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const TICK_MS = 10; // USER_HZ is 100 on Linux.

function procTimes(): Map<number, { ppid: number; ms: number }> {
  const out = new Map<number, { ppid: number; ms: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command (which may contain spaces) start at state: ppid is 2nd, utime 12th, stime 13th.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.set(Number(name), { ppid: Number(f[1]), ms: (Number(f[11]) + Number(f[12])) * TICK_MS });
    } catch {
      // The process ended meanwhile.
    }
  }
  return out;
}

/** CPU ms of one process so far (null when it has ended or cannot be read). */
export function processCpuMs(pid: number | undefined): number | null {
  if (!pid) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch {
    return null;
  }
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

/** CPU ms per process of the PostgreSQL server whose data directory is `pgDir` (null when not readable). */
export function postgresCpu(pgDir: string | undefined): Map<number, number> | null {
  if (!pgDir) return null;
  let master: number;
  try {
    master = Number(readFileSync(join(pgDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return null;
  }
  const out = new Map<number, number>();
  for (const [pid, p] of procTimes()) if (pid === master || p.ppid === master) out.set(pid, p.ms);
  return out;
}

/** Starts a measurement; `stop()` gives CPU ms of this process and of PostgreSQL since. */
export function cpuMeter(pgDir: string | undefined): { stop(): { processMs: number; postgresMs: number | null } } {
  const p0 = process.cpuUsage();
  const pg0 = postgresCpu(pgDir);
  return {
    stop() {
      const p = process.cpuUsage(p0);
      const pg1 = postgresCpu(pgDir);
      let postgresMs: number | null = null;
      if (pg0 && pg1) {
        // Per process: a backend that exited meanwhile must not subtract its earlier total.
        postgresMs = 0;
        for (const [pid, ms] of pg1) postgresMs += ms - (pg0.get(pid) ?? 0);
      }
      return { processMs: (p.user + p.system) / 1000, postgresMs };
    },
  };
}
