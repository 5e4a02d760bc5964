/**
 * Real bounces, end to end: the product (role mta) sends through a throwaway Postfix and a
 * throwaway Exim on loopback; each relays to a sink that answers 550 5.1.1, 452 4.2.2, or
 * never answers, and sends its own DSN to the product's inbound listener. Each DSN is
 * attributed by its VERP envelope token, and the test checks reason, hard/soft, suppression
 * and the `bounced` event. Skips, saying why, only where an MTA cannot run here.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MTA_EVENT } from '../../../src/shared/contracts/mta.js';
import { bearerApi, startTestApp, type TestApp } from '../../harness/app.js';
import { pollUntil, startDnsServer, type DnsServer } from '../../harness/dns.js';
import { startHttpReceiver, type HttpReceiver } from '../../harness/http-receiver.js';
import { eximUnavailable, postfixUnavailable, startEximRelay, startPostfixRelay, type RelayMta } from '../../harness/relay-mta.js';
import { startSmtpSink, type SmtpSink } from '../../harness/smtp-sink.js';
import { postedEvents } from '../helpers.js';

const KEY = 'lm_mta_real_mta_0123456789abcdefghijklmnop';
const rsaPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const postfixWhy = postfixUnavailable();
const eximWhy = await eximUnavailable();

async function freePort(host: string): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, host, r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

let sink: SmtpSink;
beforeAll(async () => {
  // The remote mailbox server behind the relay: refuses, defers, or never answers RCPT.
  sink = await startSmtpSink({
    host: '127.0.0.24',
    script: ({ stage, rcpt: address }) => {
      if (stage !== 'rcpt') return undefined;
      const rcpt = address ?? '';
      if (rcpt.startsWith('gone')) return { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown in local recipient table` };
      if (rcpt.startsWith('full')) return { code: 452, message: `4.2.2 <${rcpt}>: Mailbox full` };
      if (rcpt.startsWith('slow')) return { hang: true };
      return undefined;
    },
  });
});
afterAll(() => sink?.close());

for (const [name, why, start, relayHost] of [
  ['postfix', postfixWhy, startPostfixRelay, '127.0.0.25'],
  ['exim', eximWhy, startEximRelay, '127.0.0.26'],
] as const) {
  describe.skipIf(why !== null)(`${name} returns real DSNs to the bounce server${why ? ` (skipped: ${why})` : ''}`, () => {
    let relay: RelayMta;
    let dns: DnsServer;
    let backend: HttpReceiver;
    let app: TestApp;
    const api = bearerApi(() => app.mtaUrl!, KEY);

    beforeAll(async () => {
      const { dkimTxtRecord } = await import('../../../src/mta/delivery/dkim/keys.js');
      backend = await startHttpReceiver();
      dns = await startDnsServer({
        zones: {
          'dest.test': [
            { name: '@', type: 'MX', value: '10 relay.dest.test' },
            { name: 'relay', type: 'A', value: relayHost },
          ],
          'sender.test': [{ name: 'rm._domainkey', type: 'TXT', value: dkimTxtRecord(rsaPem) }],
        },
      });
      // The inbound port is chosen first: the relay must know where its DSNs go before the
      // product (which must know the relay's port) starts.
      const inboundPort = await freePort('127.0.0.1');
      relay = await start({ host: relayHost, relayTo: { host: sink.host, port: sink.port }, bouncesTo: { host: '127.0.0.1', port: inboundPort }, bounceDomain: 'bounces.sender.test', replyTimeoutSec: 2 });
      app = await startTestApp({
        role: 'mta',
        env: {
          MTA_API_KEY: KEY,
          BOUNCE_VERP_KEY: `real-mta-verp-key-${name}-0123456789`,
          BOUNCE_HOST: 'bounces.sender.test',
          DNS_SERVERS: dns.servers,
          MTA_DELIVERY_PORT: String(relay.port),
          INBOUND_SMTP_PORT: String(inboundPort),
          MTA_POOLS: 'transactional:127.0.0.2@mta1.sender.test',
          MTA_WARMED_IPS: '127.0.0.2',
          MTA_WEBHOOK_URL: `${backend.url}/webhooks/mta`,
          MTA_WEBHOOK_SECRET: 'real-mta-secret',
        },
      });
      expect(app.mta!.inbound.port).toBe(inboundPort);
      expect((await api('POST', '/dkim', { domain: 'sender.test', selector: 'rm', privateKey: rsaPem })).status).toBeLessThan(300);
    }, 120_000);

    afterAll(async () => {
      await app?.close();
      await relay?.stop();
      await Promise.all([dns?.stop(), backend?.close()]);
    });

    it('550 5.1.1 → hard userunknown, suppressed; 452 4.2.2 → soft mailboxfull; no answer → soft; each one `bounced` event', async () => {
      for (const who of ['gone', 'full', 'slow']) {
        const r = await api('POST', '/send', {
          messageId: `${name}-${who}`,
          to: `${who}-${name}@dest.test`,
          from: 'News <news@sender.test>',
          subject: 'Hello',
          html: '<p>Hello</p>',
          ipPool: 'transactional',
          organizationId: 'org-real',
          dkimDomain: 'sender.test',
        });
        expect(r.status).toBe(202);
      }
      const bounced = () => postedEvents(backend.requests).filter((e) => e.event === MTA_EVENT.bounced);
      await pollUntil(async () => bounced().length >= 3, 90_000, () => `${bounced().length} bounced events so far\n${relay.log().slice(-3000)}`);
      const by = (who: string) => bounced().find((e) => e.data.messageId === `${name}-${who}`)!;
      expect(by('gone').data).toMatchObject({ recipient: `gone-${name}@dest.test`, type: 'hard', reason: 'userunknown', enhancedCode: '5.1.1', source: 'dsn', organizationId: 'org-real' });
      expect(by('full').data).toMatchObject({ recipient: `full-${name}@dest.test`, type: 'soft', reason: 'mailboxfull', source: 'dsn' });
      expect(by('slow').data).toMatchObject({ recipient: `slow-${name}@dest.test`, type: 'soft', source: 'dsn' });
      expect(bounced()).toHaveLength(3);
      // Our MTA's own delivery succeeded: the relay took each message (sent), the bounce came later.
      expect(postedEvents(backend.requests).filter((e) => e.event === MTA_EVENT.sent)).toHaveLength(3);
      expect((await api('GET', `/suppression/check/gone-${name}@dest.test`)).body.data).toMatchObject({ suppressed: true, reason: 'hard_bounce' });
      expect((await api('GET', `/suppression/check/full-${name}@dest.test`)).body.data.suppressed).toBe(false);
      expect((await api('GET', `/suppression/check/slow-${name}@dest.test`)).body.data.suppressed).toBe(false);
    }, 150_000);
  });
}
