/**
 * A domain with both an RSA and an Ed25519 DKIM key (migration 023): keys added through the
 * MTA API, a message sent through POST /send → queue → pipeline → delivery to a loopback
 * sink carries two DKIM-Signature headers, and dkimpy (an implementation we did not write)
 * verifies both against the test DNS server. Also: rows written before 023 migrate as they are.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../src/shared/clock.js';
import { migrate } from '../../src/shared/db/migrate.js';
import { MIGRATIONS } from '../../src/shared/db/migrations/index.js';
import { PgDkimKeyStore } from '../../src/mta/stores/dkim.js';
import { dkimTxtRecord } from '../../src/mta/delivery/dkim/keys.js';
import { bearerApi, startTestApp, type TestApp } from '../harness/app.js';
import { createEmptyDatabase } from '../harness/db.js';
import { startDnsServer, type DnsServer } from '../harness/dns.js';
import { startSmtpSink, type SmtpSink } from '../harness/smtp-sink.js';
import { dkimpyVerify } from './delivery/dkimpy.js';

const KEY = 'lm_mta_dual_0123456789abcdefghijklmnopqrstuvwxyz';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const edPem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

describe('signing with both keys of a domain', () => {
  let dns: DnsServer;
  let sink: SmtpSink;
  let app: TestApp;

  const api = bearerApi(() => app.mtaUrl!, KEY);

  beforeAll(async () => {
    sink = await startSmtpSink({ host: '127.0.0.17', port: 0 });
    dns = await startDnsServer({
      zones: {
        'dual.test': [
          { name: '@', type: 'MX', value: '10 mx.dual.test' },
          { name: 'mx', type: 'A', value: '127.0.0.17' },
        ],
        'sender-dual.test': [
          { name: 'rsa1._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) },
          { name: 'ed1._domainkey', type: 'TXT', value: dkimTxtRecord(edPem) },
        ],
      },
    });
    app = await startTestApp({
      role: 'mta',
      env: {
        MTA_API_KEY: KEY,
        BOUNCE_VERP_KEY: 'dual-verp-key-0123456789abcdef',
        BOUNCE_HOST: 'bounces.sender-dual.test',
        DNS_SERVERS: dns.servers,
        MTA_DELIVERY_PORT: String(sink.port),
        MTA_POOLS: 'transactional:127.0.0.2@mta1.sender-dual.test;campaign:127.0.0.3@mta2.sender-dual.test',
        MTA_WARMED_IPS: '127.0.0.2,127.0.0.3',
        EMAIL_PROVIDER: 'mta',
      },
    });
  }, 120_000);

  afterAll(async () => {
    await app?.close();
    await Promise.all([sink?.close(), dns?.stop()]);
  });

  it('POST /send for a domain with an RSA and an Ed25519 key: two DKIM-Signature headers, both pass dkimpy', async () => {
    expect((await api('POST', '/dkim', { domain: 'sender-dual.test', selector: 'rsa1', privateKey: rsaPem })).status).toBe(201);
    expect((await api('POST', '/dkim', { domain: 'sender-dual.test', selector: 'ed1', privateKey: edPem })).status).toBe(201);
    const listed = (await api('GET', '/dkim')).body.data.filter((k: any) => k.domain === 'sender-dual.test');
    expect(listed.map((k: any) => `${k.algorithm}:${k.selector}`)).toEqual(['rsa-sha256:rsa1', 'ed25519-sha256:ed1']);

    const sent = await api('POST', '/send', {
      messageId: 'dual-1',
      to: 'bob@dual.test',
      from: 'News <news@sender-dual.test>',
      subject: 'Two signatures',
      html: '<p>Signed twice</p>',
      ipPool: 'transactional',
      organizationId: 'org-dual',
      dkimDomain: 'sender-dual.test',
    });
    expect(sent.status).toBe(202);
    const [m] = await sink.waitForMessages(1, 20_000);
    const head = m!.data.toString('latin1').split('\r\n\r\n')[0]!;
    const sigs = head.split(/\r\n(?![ \t])/).filter((h) => /^dkim-signature:/i.test(h));
    expect(sigs).toHaveLength(2);
    expect(sigs[0]).toMatch(/a=rsa-sha256;/);
    expect(sigs[0]).toMatch(/s=rsa1;/);
    expect(sigs[1]).toMatch(/a=ed25519-sha256;/);
    expect(sigs[1]).toMatch(/s=ed1;/);
    expect(await dkimpyVerify(m!.data, dns)).toEqual(['pass', 'pass']);
  });
});

describe('migration 023 on keys written before it', () => {
  it('keeps every key; a pending RSA key left on an Ed25519-only domain activates as its RSA key, the Ed25519 key stays', async () => {
    const db = await createEmptyDatabase();
    try {
      const at = MIGRATIONS.findIndex((m) => m.id === '023_dkim_multi_key');
      expect(at).toBeGreaterThan(0);
      await migrate(db.pool, undefined, MIGRATIONS.slice(0, at));
      const now = new Date();
      // Before 023 a domain had one row; a rotation of an Ed25519-only domain hung an RSA key on it.
      await db.pool.query(
        `INSERT INTO mta_dkim_keys (domain, selector, private_key_pem, algorithm, created_at, updated_at, pending_selector, pending_private_key_pem, pending_algorithm, pending_created_at)
         VALUES ('old-ed.test', 'ed1', $1, 'ed25519', $3, $3, 'lm20260101abcd', $2, 'rsa', $3),
                ('old-rsa.test', 'r1', $2, 'rsa', $3, $3, NULL, NULL, NULL, NULL)`,
        [edPem, rsaPem, now],
      );
      await migrate(db.pool);
      const store = new PgDkimKeyStore(db.pool, systemClock);
      const sel = async (d: string) => (await store.getSigningKeys(d)).map((k) => `${k.algorithm}:${k.selector}`);
      expect(await sel('old-rsa.test')).toEqual(['rsa-sha256:r1']);
      expect(await sel('old-ed.test')).toEqual(['ed25519-sha256:ed1']);
      expect((await store.get('old-ed.test'))[0]!.pending).toMatchObject({ selector: 'lm20260101abcd', algorithm: 'rsa-sha256' });

      expect(await store.activatePendingKey('old-ed.test')).toBe(true);
      expect(await sel('old-ed.test')).toEqual(['rsa-sha256:lm20260101abcd', 'ed25519-sha256:ed1']);
      expect((await store.get('old-ed.test')).map((k) => k.pending)).toEqual([null, null]);
      // Both algorithms now fit beside each other.
      expect((await store.upsert('old-rsa.test', 'e1', edPem)).created).toBe(true);
      expect(await sel('old-rsa.test')).toEqual(['rsa-sha256:r1', 'ed25519-sha256:e1']);
    } finally {
      await db.drop();
    }
  });
});
