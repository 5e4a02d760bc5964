/**
 * End-to-end mode of `npm run bench:mta` (BENCH_MODE=e2e|all): the whole product in one
 * process (startLettermill, role all) on the bench's PostgreSQL, DNS and sink. A generator
 * POSTs N jobs to the MTA's /send across the bench domains; every job passes the queue and
 * the ten phases and is delivered with DKIM RSA-2048. Raised for the bench, through the API
 * as an operator would: ISP profiles of the bench domains and the organization's limits; the
 * sending IPs are listed as warm (MTA_WARMED_IPS).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLettermill } from '../src/runtime/boot.js';
import type { DnsServer } from '../test/harness/dns.js';

export interface EndToEndResult {
  elapsedMs: number;
  postMs: number;
  rate: number;
}

const MTA_KEY = 'lm_mta_bench_0123456789abcdefghijklmnopqrstuvwxyz';

export async function runEndToEnd(o: {
  databaseUrl: string;
  dns: DnsServer;
  sinkHost: string;
  sinkPort: number;
  sinkCount: () => number;
  rsaPem: string;
  n: number;
  bytes: number;
  domains: number;
  html: (bytes: number, seed: number) => string;
}): Promise<EndToEndResult> {
  const dataDir = mkdtempSync(join(tmpdir(), 'lm-bench-e2e-'));
  const running = await startLettermill({
    role: 'all',
    announce: () => {},
    env: {
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      HOST: '127.0.0.1',
      PORT: '0',
      MTA_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: o.databaseUrl,
      MTA_API_KEY: MTA_KEY,
      BOUNCE_VERP_KEY: 'bench-verp-key-0123456789abcdef',
      BOUNCE_HOST: 'bounces.sender.bench.test',
      DNS_SERVERS: o.dns.servers,
      MTA_DELIVERY_PORT: String(o.sinkPort),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.bench.test;campaign:127.0.0.3@mta2.bench.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      EMAIL_PROVIDER: 'mta',
    },
  });
  try {
    const base = running.mtaUrl!;
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${MTA_KEY}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (res.status >= 300) throw new Error(`${method} ${path} → ${res.status} ${await res.text()}`);
      return res;
    };
    await call('POST', '/dkim', { domain: 'sender.bench.test', selector: 'bench1', privateKey: o.rsaPem });
    await call('POST', '/org-limits', { organizationId: 'org-bench', daily: 100_000_000, hourly: 100_000_000 });
    for (let d = 0; d < o.domains; d++) {
      await call('PUT', `/isp-profiles/d${d}.bench.test`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 });
    }
    const bodies = Array.from({ length: 8 }, (_, i) => o.html(o.bytes, i));
    const startCount = o.sinkCount();
    const start = performance.now();
    let next = 0;
    const stamp = Date.now();
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        for (;;) {
          const i = next++;
          if (i >= o.n) return;
          await call('POST', '/send', {
            messageId: `e2e-${o.bytes}-${stamp}-${i}`,
            to: `user${i}@d${i % o.domains}.bench.test`,
            from: 'Bench News <news@sender.bench.test>',
            subject: `Bench message ${i}`,
            html: bodies[i % bodies.length],
            ipPool: i % 2 ? 'campaign' : 'transactional',
            organizationId: 'org-bench',
            dkimDomain: 'sender.bench.test',
            headers: { 'List-Unsubscribe': `<https://sender.bench.test/u/${i}>` },
          });
        }
      }),
    );
    const postMs = performance.now() - start;
    const deadline = Date.now() + 600_000;
    while (o.sinkCount() < startCount + o.n) {
      if (Date.now() > deadline) throw new Error(`end to end: only ${o.sinkCount() - startCount} of ${o.n} reached the sink in 10 minutes`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const elapsedMs = performance.now() - start;
    return { elapsedMs, postMs, rate: (o.n * 1000) / elapsedMs };
  } finally {
    await running.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
