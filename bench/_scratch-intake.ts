import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../src/runtime/embedded-postgres.js';
import { startLettermill } from '../src/runtime/boot.js';
import { silentLogger } from '../src/shared/log.js';
import { htmlBody } from './mta.js';

const N = Number(process.env.N ?? 5000);
const C = Number(process.env.C ?? 32);
const KEY = 'lm_mta_bench_0123456789abcdefghijklmnopqrstuvwxyz';
const tmp = mkdtempSync(join(tmpdir(), 'lm-intake-'));
const pg = await startEmbeddedPostgres({ dataDir: tmp, password: 'bench', log: silentLogger, database: 'lm_bench' });
const running = await startLettermill({ role: 'mta', announce: () => {}, env: { NODE_ENV: 'test', LOG_LEVEL: 'silent', HOST: '127.0.0.1', PORT: '0', MTA_PORT: '0', DATA_DIR: join(tmp, 'd'), DATABASE_URL: pg.url, MTA_API_KEY: KEY, BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef', MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test' } });
const base = running.mtaUrl!;
const bodies = Array.from({ length: 8 }, (_, i) => htmlBody(5 * 1024, i));
for (const round of [0, 1]) {
  let next = 0;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await Promise.all(Array.from({ length: C }, async () => {
    for (;;) {
      const i = next++;
      if (i >= N) return;
      const res = await fetch(`${base}/send`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ messageId: `x-${round}-${i}`, to: `user${i}@d${i % 50}.bench.test`, from: 'Bench News <news@sender.bench.test>', subject: `Bench ${i}`, html: bodies[i % 8], ipPool: i % 2 ? 'campaign' : 'transactional', organizationId: 'org-bench', dkimDomain: 'sender.bench.test', headers: { 'List-Unsubscribe': `<https://sender.bench.test/u/${i}>` } }) });
      if (res.status !== 202) throw new Error(`${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    }
  }));
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  console.log(`round ${round}: ${N} in ${(ms / 1000).toFixed(2)} s = ${((N * 1000) / ms).toFixed(0)} req/s; cpu ${((cpu.user + cpu.system) / 1000 / N).toFixed(3)} ms/req`);
}
await running.stop();
await pg.stop();
rmSync(tmp, { recursive: true, force: true });
