/**
 * The campaign flow once per sending provider (issue 22), in headless Chromium: a campaign
 * sent through mta, smtp, ses, resend and mandrill (each a loopback stand-in checking the
 * provider's own request shape); the email as that provider received it carries both
 * List-Unsubscribe headers and our links, and its unsubscribe link, opened and clicked in the
 * browser, unsubscribes the reader. Skipped, loudly, where /usr/bin/chromium is missing.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { simpleParser } from 'mailparser';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpReceiver, type HttpReceiver, type RecordedRequest } from '../harness/http-receiver.js';
import { startSmtpSink, type SmtpSink } from '../harness/smtp-sink.js';
import { call, createTopic, membership, startBackend } from '../backend/public/helpers.js';

const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const ARTIFACTS = 'test-artifacts';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`browser tests skipped: ${CHROMIUM} not found (apt-get install -y chromium)`);

const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };

/** The email's HTML and headers as each provider received it. */
async function received(provider: string, r: RecordedRequest | undefined, sink: SmtpSink): Promise<{ html: string; headers: Record<string, string> }> {
  if (provider === 'smtp' || provider === 'ses') {
    const raw = provider === 'smtp' ? (await sink.waitForMessages(1))[0]!.data : Buffer.from(JSON.parse(r!.rawBody.toString()).Content.Raw.Data, 'base64');
    const m = await simpleParser(raw);
    const headers: Record<string, string> = {};
    for (const h of m.headerLines) headers[h.key] = h.line.slice(h.line.indexOf(':') + 1).trim();
    return { html: String(m.html), headers: { 'list-unsubscribe': headers['list-unsubscribe']!, 'list-unsubscribe-post': headers['list-unsubscribe-post']! } };
  }
  const b = JSON.parse(r!.rawBody.toString());
  const m = provider === 'mandrill' ? b.message : b;
  const lower = Object.fromEntries(Object.entries(m.headers as Record<string, string>).map(([k, v]) => [k.toLowerCase(), v]));
  return { html: m.html, headers: lower };
}

describe.skipIf(!haveChromium)('the campaign flow through each provider (phone viewport)', () => {
  let browser: Browser;
  let api: HttpReceiver;
  let sink: SmtpSink;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    api = await startHttpReceiver({
      respond: (r) => {
        if (r.url === '/send') return { status: 202, body: { data: { jobId: 'j', messageId: JSON.parse(r.rawBody.toString()).messageId, status: 'queued' } } };
        if (r.url === '/v2/email/outbound-emails') return { status: 200, body: { MessageId: 'ses-browser-1' } };
        if (r.url === '/emails') return { status: 200, body: { id: 'resend-browser-1' } };
        if (r.url === '/messages/send.json') return { status: 200, body: [{ email: 'reader@example.com', status: 'sent', _id: 'mandrillbrowser1' }] };
        return 404;
      },
    });
    sink = await startSmtpSink();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await api?.close();
    await sink?.close();
  });

  it.each(['mta', 'smtp', 'ses', 'resend', 'mandrill'])('%s: sent, its unsubscribe link works in the browser', async (provider) => {
    api.reset();
    sink.reset();
    const b = await startBackend({
      env: {
        EMAIL_PROVIDER: provider,
        MTA_URL: api.url,
        MTA_API_KEY: 'k',
        SMTP_RELAY_URL: `smtp://127.0.0.1:${sink.port}`,
        AWS_ACCESS_KEY_ID: 'AKIDBROWSER000000001',
        AWS_SECRET_ACCESS_KEY: 'browser-secret',
        AWS_REGION: 'eu-west-1',
        SES_ENDPOINT: api.url,
        RESEND_API_KEY: 're_browser',
        RESEND_API_URL: api.url,
        MANDRILL_API_KEY: 'md-browser',
        MANDRILL_API_URL: api.url,
      },
    });
    try {
      const topic = await createTopic(b.url, 'Acme Weekly');
      const at = new Date().toISOString();
      await b.app.db.pool.query(`INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ('ct_web', 'reader@example.com', 'api', $1, $1)`, [at]);
      await b.app.db.pool.query(`INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) VALUES ($1, 'ct_web', 'confirmed', 'api', $2, $2)`, [topic.id, at]);
      const c = await call(b.url, 'POST', '/admin/campaigns', {
        admin: true,
        json: { subject: 'Spring sale is on', from: 'Acme <news@acme.example>', topicId: topic.id, html: '<h1>Spring sale</h1><p><a href="https://shop.acme.example/sale">Shop the sale</a></p>' },
      });
      expect((await call(b.url, 'POST', `/admin/campaigns/${c.body.data.id}/send`, { admin: true })).status).toBe(202);
      const [req] = provider === 'smtp' ? [undefined] : await api.waitFor(1, 30_000);
      const email = await received(provider, req, sink);
      expect(email.headers['list-unsubscribe']).toMatch(new RegExp(`^<${b.url}/unsub/`));
      expect(email.headers['list-unsubscribe-post']).toBe('List-Unsubscribe=One-Click');
      const hrefs = [...email.html.matchAll(/href="([^"]+)"/g)].map((m) => m[1]!.replace(/&amp;/g, '&'));
      expect(hrefs.some((h) => h.startsWith(`${b.url}/t/c/`))).toBe(true); // the tracked link
      const link = hrefs.find((h) => h.startsWith(`${b.url}/unsub/`))!;

      const page = await (await browser.newContext(PHONE)).newPage();
      await page.goto(link);
      await page.getByRole('button', { name: 'Unsubscribe' }).click();
      await page.getByRole('heading', { name: 'You are unsubscribed' }).waitFor();
      await page.screenshot({ path: `${ARTIFACTS}/unsubscribe-${provider}.png`, fullPage: true });
      expect((await membership(b.app.db.pool, 'ct_web', topic.id))!.unsubscribed_at).not.toBeNull();
      const row = (await b.app.db.pool.query(`SELECT provider, status, provider_message_id FROM email_sends WHERE campaign_id = $1`, [c.body.data.id])).rows[0];
      expect(row).toMatchObject({ provider, status: 'accepted' });
      expect(row.provider_message_id).toBeTruthy();
    } finally {
      await b.close();
    }
  }, 60_000);
});
