/**
 * The whole product (role all, EMAIL_PROVIDER=mta) delivering to a loopback SMTP sink: the
 * harness's DNS server answers the recipient domain's MX with the sink's address, the MTA signs
 * for sender.test with a fresh Ed25519 key, and the domain's rate is lifted so that pacing is not
 * what a test measures. Used by the campaign tests that go backend → MTA → sink.
 */
import { generateKeyPairSync } from 'node:crypto';
import { expect } from 'vitest';
import { bearerApi, startTestApp, type TestApp } from './app.js';
import { startDnsServer, type DnsServer } from './dns.js';
import { startSmtpSink, type SmtpSink } from './smtp-sink.js';

export interface ProductToSink {
  app: TestApp;
  sink: SmtpSink;
  dns: DnsServer;
  /** The backend's admin API (Bearer ADMIN_TOKEN). */
  admin: ReturnType<typeof bearerApi>;
  /** The MTA's API (Bearer master key). */
  mta: ReturnType<typeof bearerApi>;
  /** A topic with `emails` as confirmed members (contact ids `ct_<prefix><i>`, i from 0). */
  topicWith(name: string, emails: string[]): Promise<string>;
  close(): Promise<void>;
}

export async function startProductToSink(o: { domain: string; sinkHost: string; name: string; env?: Record<string, string> }): Promise<ProductToSink> {
  const key = `lm_mta_${o.name}_0123456789abcdefghijklmnopqrstuvwxyz`;
  const adminToken = `lm_admin_${o.name}_0123456789abcdefghijklmnopqrstuvwxyz`;
  const sink = await startSmtpSink({ host: o.sinkHost, port: 0 });
  const dns = await startDnsServer({ zones: { [o.domain]: [{ name: '@', type: 'MX', value: `10 mx.${o.domain}` }, { name: 'mx', type: 'A', value: o.sinkHost }] } });
  const app = await startTestApp({
    role: 'all',
    env: {
      ADMIN_TOKEN: adminToken,
      MTA_API_KEY: key,
      BASE_URL: 'http://127.0.0.1:9',
      BOUNCE_VERP_KEY: `${o.name}-verp-key-0123456789abcdef`,
      BOUNCE_HOST: 'bounces.sender.test',
      DNS_SERVERS: dns.servers,
      MTA_DELIVERY_PORT: String(sink.port),
      MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test;campaign:127.0.0.3@mta2.sender.test',
      MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
      EMAIL_PROVIDER: 'mta',
      ...o.env,
    },
  });
  const admin = bearerApi(() => app.backendUrl!, adminToken);
  const mta = bearerApi(() => app.mtaUrl!, key);
  const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  expect((await mta('POST', '/dkim', { domain: 'sender.test', selector: o.name, privateKey: pem })).status).toBeLessThan(300);
  // The domain's rate is not what these tests are about: without this the MTA paces retries minutes out.
  expect((await mta('PUT', `/isp-profiles/${o.domain}`, { defaultRate: 1_000_000, ceiling: 1_000_000, floor: 1, backoffFactor: 0.5, recoveryFactor: 1.1 })).status).toBeLessThan(300);
  return {
    app,
    sink,
    dns,
    admin,
    mta,
    async topicWith(name, emails) {
      const topicId = (await admin('POST', '/admin/topics', { name })).body.data.id as string;
      const now = new Date().toISOString();
      const ids = emails.map((e) => `ct_${/^[^@]+/.exec(e)![0].replace(/[^a-z0-9]/gi, '')}`);
      await app.db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) SELECT i, e, 'api', $1, $1 FROM unnest($2::text[], $3::text[]) AS u(i, e)`, [now, ids, emails]);
      await app.db.pool.query(
        `INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) SELECT $1, i, 'not_required', 'api', $2, $2 FROM unnest($3::text[]) AS u(i)`,
        [topicId, now, ids],
      );
      return topicId;
    },
    async close() {
      await app.close();
      await Promise.all([sink.close(), dns.stop()]);
    },
  };
}
