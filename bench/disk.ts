/**
 * Disk I/O per message for benchmarks on Linux: the block devices' own counters
 * (/proc/diskstats) around a run, so a figure counts what reached the disk, fsyncs included,
 * whichever process wrote it (a peer's queue files, PostgreSQL's WAL and pages). The counters
 * are machine-wide: the benchmark runs one system at a time, and nothing else on the machine
 * writes much. Per-process counters (/proc/<pid>/io) would miss Postfix's daemons that exit
 * within a run: unlike CPU time, a reaped child's I/O is not added to its parent's.
 *
 * Writes reach the disk late (the kernel writes dirty pages back after up to 30 s, PostgreSQL
 * writes its pages at checkpoints), so a meter first syncs what earlier work left dirty and, at
 * the end, makes the run's own dirty data reach the disk: with PostgreSQL a CHECKPOINT, then
 * `sync`. The checkpoint writes every page dirtied since the last one once, those of the run's
 * warm-up too (mostly the same pages: the queue reuses its space); with the embedded server's
 * own checkpoints (every 15 minutes or 4 GB of WAL) a queue page reused all along is written once
 * per checkpoint, so for us the figure is an upper bound. No checkpoint at the start: the
 * first change of each page after one is logged as a whole page (a full-page image), and a run
 * that began with a checkpoint would pay for every page it touches.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);

/** Disk I/O per unit of work (null: the machine's counters cannot be read). */
export interface DiskPerUnit {
  /** KB written to the disks. */
  writtenKb: number;
  /** Write requests completed (after the block layer merged adjacent ones). */
  writes: number;
  /** Cache flushes the disks completed: fsync and fdatasync end in one. */
  flushes: number;
  /** PostgreSQL's WAL, KB (null: not measured), full-page images included. */
  walKb: number | null;
}

interface DiskCounters {
  sectorsWritten: number;
  writes: number;
  flushes: number;
}

/**
 * The whole disks' counters summed (partitions and device-mapper or loop devices would count
 * the same writes twice): a disk is a /sys/block entry with a device behind it.
 */
function diskCounters(): DiskCounters | null {
  let text: string;
  try {
    text = readFileSync('/proc/diskstats', 'utf8');
  } catch {
    return null;
  }
  const sum: DiskCounters = { sectorsWritten: 0, writes: 0, flushes: 0 };
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 14 || !existsSync(`/sys/block/${f[2]}/device`)) continue;
    // After major, minor and name: writes completed is the 5th counter, sectors written the
    // 7th, flushes completed the 16th (kernel 5.5 and later; absent before).
    sum.writes += Number(f[7]);
    sum.sectorsWritten += Number(f[9]);
    sum.flushes += Number(f[18] ?? 0);
  }
  return sum;
}

/** The server's WAL position, in bytes. */
async function walBytes(client: pg.Client): Promise<number> {
  const r = await client.query<{ b: string }>(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS b`);
  return Number(r.rows[0]!.b);
}

/**
 * Starts measuring the disks (after a sync); `stop(n)` makes the run's own writes reach the disk
 * and divides by n units. `postgresUrl`: a connection to the PostgreSQL server the measured
 * system writes to (its WAL is counted, and its pages are checkpointed at the end).
 */
export async function diskMeter(postgresUrl?: string): Promise<{ stop(n: number): Promise<DiskPerUnit | null> }> {
  const client = postgresUrl ? new pg.Client({ connectionString: postgresUrl }) : null;
  await client?.connect();
  try {
    await run('sync');
    const disk0 = diskCounters();
    const wal0 = client ? await walBytes(client) : null;
    return {
      async stop(n) {
        try {
          const wal1 = client ? await walBytes(client) : null;
          // A role that may not checkpoint (neither superuser nor pg_checkpoint): the pages the
          // server writes later are not counted, the WAL still is.
          if (client) await client.query('CHECKPOINT').catch(() => {});
          await run('sync');
          const disk1 = diskCounters();
          if (!disk0 || !disk1) return null;
          return {
            writtenKb: ((disk1.sectorsWritten - disk0.sectorsWritten) * 512) / 1024 / n,
            writes: (disk1.writes - disk0.writes) / n,
            flushes: (disk1.flushes - disk0.flushes) / n,
            walKb: wal0 === null || wal1 === null ? null : (wal1 - wal0) / 1024 / n,
          };
        } finally {
          await client?.end();
        }
      },
    };
  } catch (err) {
    await client?.end();
    throw err;
  }
}
