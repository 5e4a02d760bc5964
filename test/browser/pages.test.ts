/**
 * The pages people reach from emails, clicked through in headless Chromium (Debian's
 * `chromium` driven by playwright-core) on a phone-sized screen. Screenshots are kept in
 * test-artifacts/ (git-ignored). Skipped, loudly, where /usr/bin/chromium is missing.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHttpReceiver, type HttpReceiver } from '../harness/http-receiver.js';
import { call, createTopic, eventually, membership, startBackend, type Backend } from '../backend/public/helpers.js';

const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const ARTIFACTS = 'test-artifacts';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`browser tests skipped: ${CHROMIUM} not found (apt-get install -y chromium)`);

const PHONE = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };

describe.skipIf(!haveChromium)('pages in a browser (phone viewport)', () => {
  let browser: Browser;
  let b: Backend;
  let mta: HttpReceiver;
  let topic: { id: string; name: string };
  let offers: { id: string; name: string };
  let email: { html: string; to: string };
  let archiveToken: string;

  const hrefs = (html: string) => [...html.matchAll(/href="([^"]+)"/g)].map((m) => m[1]!.replace(/&amp;/g, '&'));
  const newPage = async (): Promise<Page> => (await browser.newContext(PHONE)).newPage();

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    mta = await startHttpReceiver({ respond: () => ({ status: 202, body: { data: { jobId: 'j', messageId: 'm', status: 'queued' } } }) });
    b = await startBackend({ env: { EMAIL_PROVIDER: 'mta', MTA_URL: mta.url, MTA_API_KEY: 'k' } });
    topic = await createTopic(b.url, 'Acme Weekly');
    offers = await createTopic(b.url, 'Special offers');
    const at = new Date().toISOString();
    await b.app.db.pool.query(`INSERT INTO contacts (id, email, first_name, source, created_at, updated_at) VALUES ('ct_web', 'reader@example.com', 'Rea', 'api', $1, $1)`, [at]);
    for (const t of [topic, offers]) {
      await b.app.db.pool.query(`INSERT INTO topic_memberships (topic_id, contact_id, doi_status, source, created_at, updated_at) VALUES ($1, 'ct_web', 'confirmed', 'api', $2, $2)`, [t.id, at]);
    }
    const c = await call(b.url, 'POST', '/admin/campaigns', {
      admin: true,
      json: {
        subject: 'Spring sale is on',
        from: 'Acme <news@acme.example>',
        topicId: topic.id,
        html: `<!doctype html><html><body style="font-family:Georgia,serif;background:#fdf6e3;padding:16px">
<h1 style="color:#b58900">Spring sale</h1><p>Everything in the garden shop is 20% off until Sunday.</p>
<p><a href="https://shop.acme.example/sale" style="background:#268bd2;color:#fff;padding:10px 16px;border-radius:6px;text-decoration:none">Shop the sale</a></p>
</body></html>`,
      },
    });
    const s = await call(b.url, 'POST', `/admin/campaigns/${c.body.data.id}/send`, { admin: true });
    archiveToken = s.body.data.archiveToken;
    const [req] = await mta.waitFor(1);
    email = JSON.parse(req!.rawBody.toString());
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await b?.close();
    await mta?.close();
  });

  it('unsubscribe: the email link, one button, a confirmation', async () => {
    const link = hrefs(email.html).find((h) => h.startsWith(`${b.url}/unsub/`))!;
    const page = await newPage();
    await page.goto(link);
    await page.getByRole('button', { name: 'Unsubscribe' }).waitFor();
    expect(await page.locator('#ask-topic').textContent()).toBe('Acme Weekly');
    expect(await page.locator('#ask-email').textContent()).toBe('r•••@example.com');
    await page.screenshot({ path: `${ARTIFACTS}/unsubscribe-ask.png`, fullPage: true });
    await page.getByRole('button', { name: 'Unsubscribe' }).click();
    await page.getByRole('heading', { name: 'You are unsubscribed' }).waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/unsubscribe-done.png`, fullPage: true });
    expect((await membership(b.app.db.pool, 'ct_web', topic.id))!.unsubscribed_at).not.toBeNull();
    expect((await membership(b.app.db.pool, 'ct_web', offers.id))!.unsubscribed_at).toBeNull();
    // Coming back shows the settled state.
    await page.reload();
    await page.getByRole('heading', { name: 'You are unsubscribed' }).waitFor();
    expect(await page.getByRole('link', { name: 'Manage your subscriptions' }).isVisible()).toBe(true);
  });

  it('preference center: change topics and save', async () => {
    const link = hrefs(email.html).find((h) => h.startsWith(`${b.url}/prefs/`))!;
    const page = await newPage();
    await page.goto(link);
    const weekly = page.getByLabel('Acme Weekly');
    const special = page.getByLabel('Special offers');
    await weekly.waitFor();
    expect(await weekly.isChecked()).toBe(false); // unsubscribed in the previous test
    expect(await special.isChecked()).toBe(true);
    await weekly.check();
    await special.uncheck();
    await page.getByRole('button', { name: 'Save preferences' }).click();
    await page.getByText('Your preferences are saved.').waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/preferences.png`, fullPage: true });
    expect((await membership(b.app.db.pool, 'ct_web', topic.id))!.unsubscribed_at).toBeNull();
    expect((await membership(b.app.db.pool, 'ct_web', offers.id))!.unsubscribed_at).not.toBeNull();
  });

  it('double opt-in: the confirmation link opens a page; only the button confirms', async () => {
    const f = await call(b.url, 'POST', '/admin/forms', { admin: true, json: { name: 'Sign-up', topicId: topic.id, doubleOptIn: true } });
    mta.reset();
    const sub = await call(b.url, 'POST', `/forms/${f.body.data.id}`, { json: { email: 'newbie@example.com', firstName: 'Nell' } });
    expect(sub.body.data.confirmationRequired).toBe(true);
    const [req] = await mta.waitFor(1);
    const link = /Confirm your subscription: (\S+)/.exec(JSON.parse(req!.rawBody.toString()).text)![1]!;
    const page = await newPage();
    await page.goto(link);
    await page.getByRole('button', { name: 'Confirm subscription' }).waitFor();
    const contact = async () => (await b.app.db.pool.query(`SELECT id FROM contacts WHERE email = 'newbie@example.com'`)).rows[0];
    expect(await contact()).toBeUndefined(); // opening the page confirms nothing
    await page.screenshot({ path: `${ARTIFACTS}/doi-ask.png`, fullPage: true });
    await page.getByRole('button', { name: 'Confirm subscription' }).click();
    await page.getByRole('heading', { name: 'Subscription confirmed' }).waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/doi-confirmed.png`, fullPage: true });
    const c = await eventually(contact);
    expect((await membership(b.app.db.pool, c.id, topic.id))!.doi_status).toBe('confirmed');
  });

  it('archive: view in browser shows the email as sent', async () => {
    const link = hrefs(email.html).find((h) => h.startsWith(`${b.url}/archive/`))!;
    expect(link).toBe(`${b.url}/archive/${archiveToken}`);
    const page = await newPage();
    await page.goto(link);
    await page.getByRole('heading', { name: 'Spring sale is on' }).waitFor();
    const frame = page.frameLocator('#frame');
    await frame.getByRole('heading', { name: 'Spring sale' }).waitFor();
    expect(await frame.getByRole('link', { name: 'Shop the sale' }).getAttribute('href')).toBe('https://shop.acme.example/sale');
    expect(await page.title()).toBe('Spring sale is on');
    await page.screenshot({ path: `${ARTIFACTS}/archive.png`, fullPage: true });
  });

  it('share preview: a template link', async () => {
    const t = await call(b.url, 'POST', '/admin/templates', {
      admin: true,
      json: { name: 'Autumn', subject: 'Autumn collection', previewText: 'New colours for cold days', html: '<h2 style="font-family:sans-serif">Autumn collection</h2><p>Coming soon.</p>' },
    });
    const l = await call(b.url, 'POST', `/admin/templates/${t.body.data.id}/share-links`, { admin: true });
    const page = await newPage();
    await page.goto(l.body.data.url);
    await page.getByText('New colours for cold days').waitFor();
    await page.frameLocator('#frame').getByRole('heading', { name: 'Autumn collection' }).waitFor();
    await page.screenshot({ path: `${ARTIFACTS}/share.png`, fullPage: true });
  });

  it('an invalid link shows a readable error', async () => {
    const page = await newPage();
    await page.goto(`${b.url}/unsub/not-a-real-token`);
    await page.getByRole('heading', { name: 'This link does not work' }).waitFor();
    expect(await page.locator('#failed-msg').textContent()).toBe('This link is not valid');
    await page.screenshot({ path: `${ARTIFACTS}/invalid-link.png`, fullPage: true });
  });
});
