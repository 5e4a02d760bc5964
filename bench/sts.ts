/**
 * MTA-STS and TLS-RPT overhead on delivery (`npm run bench:sts`), loopback only: the same
 * engine delivers N 5 KB messages over BENCH_DOMAINS recipient domains to Debian's
 * smtp-sink, once without transport security (the baseline, measured in the same run) and
 * once with the MTA-STS resolver (PostgreSQL cache; the domains publish no policy, the
 * common case) and the TLS-RPT recorder. Prints messages per second and the ratio.
 *
 * Environment: BENCH_N (4000), BENCH_DOMAINS (50), BENCH_CONCURRENCY (100), DATABASE_URL
 * (default: a fresh database on the PostgreSQL at 127.0.0.1:5432, dropped afterwards).
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { Registry } from 'prom-client';
import pg from 'pg';
import { systemClock } from '../src/shared/clock.js';
import { MemoryCoordination } from '../src/shared/coord/memory.js';
import { migrate } from '../src/shared/db/migrate.js';
import { createPool, withDatabase, type Db } from '../src/shared/db/pool.js';
import { silentLogger } from '../src/shared/log.js';
import { createDeliverer } from '../src/mta/delivery/deliverer.js';
import type { DeliveryRoute, OutboundMessage } from '../src/mta/delivery/types.js';
import { PgDkimKeyStore } from '../src/mta/stores/dkim.js';
import { StsResolver } from '../src/mta/tls/sts.js';
import { TlsRptRecorder } from '../src/mta/tls/tlsrpt.js';
import { findFreePort, startDnsServer, type DnsRecord } from '../test/harness/dns.js';
import { startPostfixSmtpSink } from '../test/harness/smtp-sink-postfix.js';

const N = Number(process.env.BENCH_N ?? 4_000);
const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 50);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 100);
const SINK = '127.0.46.10';
const ROUTE: DeliveryRoute = { pool: 'transactional', bindIp: '127.0.0.2', ehloName: 'mta1.bench.test' };

async function main(): Promise<void> {
  const admin = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `lm_bench_sts_${randomBytes(4).toString('hex')}`;
  const adminClient = new pg.Client({ connectionString: admin });
  await adminClient.connect();
  await adminClient.query(`CREATE DATABASE ${name}`);
  const db: Db = createPool(withDatabase(admin, name), { max: 10 });
  const port = await findFreePort(SINK);
  const sink = await startPostfixSmtpSink({ host: SINK, port, countOnly: true, maxConnections: 1024 });
  const zone: DnsRecord[] = [];
  for (let d = 0; d < DOMAINS; d++) zone.push({ name: `d${d}`, type: 'MX', value: `10 mx.d${d}.bench.test` }, { name: `mx.d${d}`, type: 'A', value: SINK });
  const dns = await startDnsServer({ zones: { 'bench.test': zone } });
  try {
    await migrate(db);
    const keys = new PgDkimKeyStore(db, systemClock);
    await keys.upsert('sender.bench.test', 's1', generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
    const html = `<p>${'Lorem ipsum dolor sit amet. '.repeat(180)}</p>`;

    const run = async (label: string, transport: boolean): Promise<{ rate: number; cpu: number }> => {
      const engine = createDeliverer({
        clock: systemClock,
        coord: new MemoryCoordination(),
        db,
        log: silentLogger,
        keys,
        verpKey: 'bench-verp-key-0123456789abcdef',
        bounceHost: 'bounces.bench.test',
        dnsServers: [dns.servers],
        port,
        registry: new Registry(),
        autoPrune: false,
        ...(transport
          ? { sts: new StsResolver({ db, clock: systemClock, log: silentLogger, dnsServers: [dns.servers] }), tlsrpt: new TlsRptRecorder({ db, clock: systemClock, log: silentLogger }) }
          : {}),
      });
      const msg = (i: number): OutboundMessage => ({
        messageId: `b-${label}-${i}`,
        sendId: `b-${label}-${i}`,
        organizationId: 'o',
        from: 'News <news@sender.bench.test>',
        to: `u${i}@d${i % DOMAINS}.bench.test`,
        subject: `m ${i}`,
        html,
        dkimDomain: 'sender.bench.test',
      });
      await Promise.all(Array.from({ length: DOMAINS }, (_, i) => engine.deliver(msg(-1 - i), ROUTE))); // warm caches and connections
      const base = sink.count();
      let next = 0;
      const cpu0 = process.cpuUsage();
      const start = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          for (let i = next++; i < N; i = next++) {
            const r = await engine.deliver(msg(i), ROUTE);
            if (r.status !== 'sent') throw new Error(`${label}: ${r.status} ${r.response}`);
          }
        }),
      );
      await sink.waitForCount(base + N, 60_000);
      const rate = (N * 1000) / (performance.now() - start);
      const c = process.cpuUsage(cpu0);
      const cpu = (c.user + c.system) / 1000 / N;
      await engine.close();
      console.log(`${label.padEnd(28)} ${rate.toFixed(0)} msg/s, ${cpu.toFixed(3)} CPU ms/msg`);
      return { rate, cpu };
    };

    // Alternating pairs, so drift on a shared machine hits both sides.
    const base: { rate: number; cpu: number }[] = [];
    const sts: { rate: number; cpu: number }[] = [];
    for (let p = 0; p < 2; p++) {
      base.push(await run(`baseline (no MTA-STS) #${p + 1}`, false));
      sts.push(await run(`MTA-STS + TLS-RPT #${p + 1}`, true));
    }
    // CPU per message is the steadier figure on a shared machine; wall-clock rate is printed too.
    const bestRate = (a: { rate: number }[]) => Math.max(...a.map((x) => x.rate));
    const bestCpu = (a: { cpu: number }[]) => Math.min(...a.map((x) => x.cpu));
    console.log(`ratio MTA-STS+TLS-RPT / baseline (N=${N}, ${DOMAINS} domains, concurrency ${CONCURRENCY}, best of 2):`);
    console.log(`  rate ${(bestRate(sts) / bestRate(base)).toFixed(3)}, CPU per message ${(bestCpu(sts) / bestCpu(base)).toFixed(3)}`);
  } finally {
    await sink.stop().catch(() => {});
    await dns.stop().catch(() => {});
    await db.end().catch(() => {});
    await adminClient.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await adminClient.end();
  }
}

await main();
