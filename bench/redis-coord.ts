/**
 * The coordination calls of one delivered message, alone: `node --import tsx bench/redis-coord.ts`
 * (issue 26, "the fleet configuration costs little"). Replays bench:mta's success path against
 * RedisCoordination with 50 jobs in flight (WORKER_CONCURRENCY's default), in the order the
 * phases and effects make the calls today: breaker state, intel verdict and domain backoff read
 * together (prefetch), the two org counters, throttle state then window; after the send the
 * breaker ring with its state, the throttle state read and write, the intel counter and the
 * backoff streak. Prints msg/s, this process's CPU per message and, with BENCH_REDIS_PID (the
 * redis-server's pid, read from /proc), Redis's CPU per message.
 *
 * Environment: BENCH_REDIS_URL (redis://127.0.0.1:6379; a private server is cleaner),
 * BENCH_REDIS_PID, BENCH_N (20,000), BENCH_OLD_ROOT (another checkout whose adapter to run
 * with the calls made one after another, as before the prefetch).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Coordination } from '../src/shared/coord/types.js';

const URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PID = process.env.BENCH_REDIS_PID;
const N = Number(process.env.BENCH_N ?? 20_000);
const OLD_ROOT = process.env.BENCH_OLD_ROOT;
const IN_FLIGHT = 50;

/** user + system clock ticks of the redis-server (fields 14 and 15 of /proc/<pid>/stat). */
function redisTicks(): number | null {
  if (!PID) return null;
  const f = readFileSync(`/proc/${PID}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(f[11]) + Number(f[12]);
}

async function job(c: Coordination, i: number, together: boolean): Promise<void> {
  const org = 'org-bench';
  const d = `d${i % 50}.bench.test`;
  const ip = i % 2 ? '127.0.0.2' : '127.0.0.3';
  const intel = together ? c.getJson(`mta:intel:v:${d}`) : undefined;
  const backoff = together ? c.getJson(`mta:backoff:${d}`) : undefined;
  await c.getJson(`persist:mta:breaker:${org}`);
  await Promise.all([c.incr(`persist:mta:org:${org}:d:1`, 1, 172_800_000), c.incr(`persist:mta:org:${org}:h:1`, 1, 7_200_000)]);
  await (intel ?? c.getJson(`mta:intel:v:${d}`));
  await (backoff ?? c.getJson(`mta:backoff:${d}`));
  await c.getJson(`mta:thr:s:${ip}:${d}`);
  await c.slidingWindow(`mta:thr:w:${ip}:${d}`, 1_000_000, 60_000);
  const ring = `mta:breaker:ring:${org}`;
  await Promise.all([
    together
      ? Promise.all([c.ringPush(ring, 'd', 100), c.getJson(`persist:mta:breaker:${org}`)])
      : c.ringPush(ring, 'd', 100).then(() => c.getJson(`persist:mta:breaker:${org}`)),
    c.getJson(`mta:thr:s:${ip}:${d}`).then(() => c.setJson(`mta:thr:s:${ip}:${d}`, { rate: 1_000_000, ok: i % 20, fail: 0, blockedUntil: 0 }, 86_400_000)),
    c.incr(`mta:intel:${d}:1:ok`, 1, 660_000),
    c.getCounter(`mta:backoff:n:${d}`),
  ]);
}

async function run(root: string, together: boolean): Promise<void> {
  const { RedisCoordination } = (await import(resolve(root, 'src/shared/coord/redis.ts'))) as typeof import('../src/shared/coord/redis.js');
  const c = new RedisCoordination({ url: URL, keyPrefix: `lmbench:coord:${Date.now()}:` });
  try {
    await c.ping();
    let next = 0;
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const r0 = redisTicks();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next < N) await job(c, next++, together);
      }),
    );
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const r1 = redisTicks();
    const redis = r0 !== null && r1 !== null ? `; redis-server CPU ${(((r1 - r0) * 10_000) / N).toFixed(1)} µs/msg` : '';
    console.log(
      `${root === '.' ? 'this checkout' : root}${together ? '' : ' (calls one after another)'}: ${N} messages in ${ms.toFixed(0)} ms = ${((N * 1000) / ms).toFixed(0)} msg/s; ` +
        `client CPU ${((cpu.user + cpu.system) / N).toFixed(1)} µs/msg${redis}`,
    );
  } finally {
    await c.close();
  }
}

if (OLD_ROOT) await run(OLD_ROOT, false);
await run('.', true);
