/**
 * A campaign sent from the dashboard through the real MTA to a loopback sink that rejects some
 * recipients with 550 (policy "spam": soft; user unknown: hard). The Campaigns screen shows the
 * progress and the per-recipient record by state; *Retry failed* resends only the soft bounces,
 * checked against the sink's own count. Setup: test/harness/product.ts.
 *
 * 1,000 recipients (issue 23's acceptance). The rejections are spread evenly (2 in every 50) so
 * the bounce share of any window stays under the circuit breaker's slow threshold (8 % of 100,
 * policy.breaker) and the policy rejections never come near SMTP intel's blocking share: the
 * run stays deterministic. The counts per state are read from the screen and paged through,
 * and equal the sink's own counts.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProductToSink, type ProductToSink } from '../harness/product.js';

const CHROMIUM = process.env.LM_CHROMIUM ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
const PASSWORD = 'correct horse battery staple';
const N = 1000;
/**
 * i ≡ 10 (mod 50) rejected as spam (soft), i ≡ 35 (mod 50) unknown user (hard), i ≡ 20 (mod 50)
 * on the MTA's suppression list (dropped silently: never at the sink, no event), the rest
 * accepted: 4 % bounces, evenly spread.
 */
const kind = (i: number) => (i % 50 === 10 ? 'spam' : i % 50 === 35 ? 'unknown' : i % 50 === 20 ? 'suppressed' : 'ok');
const addr = (i: number) => `m${String(i).padStart(4, '0')}@retry.test`;
const all = Array.from({ length: N }, (_, i) => i);
const SPAM = all.filter((i) => kind(i) === 'spam');
const HARD = all.filter((i) => kind(i) === 'unknown');
const SUPP = all.filter((i) => kind(i) === 'suppressed');
const OK = all.filter((i) => kind(i) === 'ok');

describe.skipIf(!haveChromium)('campaign record and retry in the dashboard', () => {
  let p: ProductToSink;
  let app: ProductToSink['app'];
  let browser: Browser;
  let topicId: string;
  let rejectSpam = true;
  const accepted = (to: string) => p.sink.messages.filter((m) => m.rcptTo.includes(to)).length;

  beforeAll(async () => {
    mkdirSync('docs/screenshots', { recursive: true });
    p = await startProductToSink({ domain: 'retry.test', sinkHost: '127.0.0.28', name: 'dash' });
    app = p.app;
    p.sink.setRcptRule((rcpt) => {
      const i = Number(/^m(\d+)@/.exec(rcpt)?.[1] ?? -1);
      if (kind(i) === 'unknown') return { code: 550, message: `5.1.1 <${rcpt}>: Recipient address rejected: User unknown` };
      if (kind(i) === 'spam' && rejectSpam) return { code: 550, message: '5.7.1 Message rejected as spam by content filter' };
      return undefined;
    });
    // On the MTA's list only (as the Deliverability → Suppressions screen writes it): the backend learns of these drops from the MTA's delivery log.
    expect((await p.mta('POST', '/suppression', { addresses: SUPP.map(addr), reason: 'manual' })).status).toBeLessThan(300);
    topicId = await p.topicWith('Retry list', all.map(addr));
    expect((await p.admin('POST', '/admin/users', { email: 'ed@sender.test', password: PASSWORD, role: 'editor' })).status).toBe(201);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'] });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await p?.close();
  });

  it('compose and send as an editor; the record shows each state; retry resends only the soft bounces', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    page.on('dialog', (d) => void d.accept());
    await page.goto(`${app.backendUrl}/campaigns/new`);
    await page.getByLabel('Email', { exact: true }).fill('ed@sender.test');
    await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'New campaign' }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('Retry me');
    await page.getByLabel('Topic (who receives it)').selectOption(topicId);
    await page.getByLabel('From', { exact: true }).fill('News <news@sender.test>');
    await page.getByLabel('Subject', { exact: true }).fill('Retry me');
    await page.getByLabel('HTML', { exact: true }).fill('<p>Hello</p>');
    await page.getByRole('button', { name: 'Save draft' }).click();
    // Schedule for later, then cancel: errors in words, the scheduled time shown, back to a draft.
    const sendAt = page.getByLabel('Send at (your local time)');
    await page.getByRole('button', { name: 'Schedule', exact: true }).click();
    await page.getByRole('alert').getByText('Choose a date and time').waitFor();
    await sendAt.fill('2020-01-01T09:00');
    await sendAt.press('Enter'); // keyboard: the control submits its form
    await page.getByRole('alert').getByText('sendAt must be in the future').waitFor();
    const later = new Date(Date.now() + 3 * 86_400_000);
    later.setSeconds(0, 0);
    const local = new Date(later.getTime() - later.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await sendAt.fill(local);
    await page.getByRole('button', { name: 'Schedule', exact: true }).click();
    await page.getByText(`Scheduled for ${later.toLocaleString('en-GB', { timeZone: 'UTC' })} UTC.`).waitFor();
    await page.locator('dd', { hasText: /^scheduled$/ }).waitFor();
    await page.getByRole('button', { name: 'Cancel schedule' }).click();
    await page.locator('dd', { hasText: /^draft$/ }).waitFor();
    expect(await page.getByRole('button', { name: 'Cancel schedule' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Send now' }).click();
    await page.getByText(`of ${N.toLocaleString('en')} handed over`).waitFor({ timeout: 120_000 });
    // The record: filter by state; every recipient gets its final state from the MTA's feedback.
    const select = page.getByRole('combobox', { name: /^Show/ });
    const table = page.locator('table', { hasText: 'Reason' });
    const pager = page.getByRole('navigation', { name: 'Recipients pages' });
    const readPage = () => table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [tr.children[0]!.textContent, tr.children[1]!.textContent, tr.children[2]!.textContent]));
    const show = async (state: string) => {
      if ((await select.inputValue()) === state) await page.getByRole('button', { name: 'Refresh' }).click();
      else await select.selectOption(state);
      await pager.getByText(/^Page 1$/).waitFor();
    };
    /** Every row of one state, paged through with Next (50 a page). */
    const rowsOf = async (state: string) => {
      await show(state);
      const rows = await readPage();
      for (let n = 2; await pager.getByRole('button', { name: 'Next' }).isEnabled(); n++) {
        await pager.getByRole('button', { name: 'Next' }).click();
        await pager.getByText(new RegExp(`^Page ${n}$`)).waitFor();
        rows.push(...(await readPage()));
      }
      return rows;
    };
    /** The campaign's counts by state as the screen prints them ("By state: delivered 960, bounced 40"). */
    const byState = async () => {
      await page.reload();
      const line = (await page.getByText(/^By state:/).textContent()) ?? '';
      return Object.fromEntries([...line.matchAll(/(\w+) (\d+)/g)].map((m) => [m[1]!, Number(m[2])]));
    };
    const settled = async (delivered: number, bounced: number) => {
      const deadline = Date.now() + 120_000;
      let by: Record<string, number> = {};
      while (Date.now() < deadline) {
        by = await byState();
        if (by.delivered === delivered && by.bounced === bounced) return by;
        await page.waitForTimeout(1000);
      }
      return by;
    };
    const sinkAccepted = () => all.filter((i) => accepted(addr(i)) > 0).length;
    expect(await settled(OK.length, SPAM.length + HARD.length)).toMatchObject({ delivered: OK.length, bounced: SPAM.length + HARD.length });
    expect(sinkAccepted()).toBe(OK.length);
    // The drops reach the record through the MTA's `dropped` events (the outbox), without a poll.
    const deadline = Date.now() + 30_000;
    while ((await byState()).suppressed !== SUPP.length && Date.now() < deadline) await page.waitForTimeout(250);
    expect(await byState()).toEqual({ delivered: OK.length, bounced: SPAM.length + HARD.length, suppressed: SUPP.length });
    const suppressed = await rowsOf('suppressed');
    expect(suppressed.map((r) => r[0]).sort()).toEqual(SUPP.map(addr));
    for (const [email, state, reason] of suppressed) expect([state, reason], email!).toEqual(['suppressed', 'manual']);
    const bounced = await rowsOf('bounced');
    expect(bounced.map((r) => r[0]).sort()).toEqual([...SPAM, ...HARD].sort((a, b) => a - b).map(addr));
    for (const [email, state, reason] of bounced) {
      expect(state, email!).toBe('bounced');
      expect(reason, email!).toMatch(kind(Number(/m(\d+)/.exec(email!)![1])) === 'spam' ? /^soft bounce/ : /^hard bounce: userunknown/);
    }
    await page.getByRole('heading', { name: 'Opens and clicks' }).waitFor();
    await page.getByText(`of ${N.toLocaleString('en')} sent.`).waitFor();
    await show('');
    await page.screenshot({ path: 'docs/screenshots/campaign-record.png', fullPage: true });
    for (let i = 0; i < N; i++) expect(accepted(addr(i)), addr(i)).toBe(kind(i) === 'ok' ? 1 : 0);

    rejectSpam = false;
    await page.getByRole('button', { name: 'Retry failed' }).click();
    await page.getByText(`${SPAM.length} failed recipients queued again.`).waitFor();
    await p.sink.waitUntil(() => SPAM.every((i) => accepted(addr(i)) === 1), 120_000, 'the resent messages');
    // "By state" counts sends: the soft bounces' first sends stay bounced beside their resends.
    expect(await settled(OK.length + SPAM.length, SPAM.length + HARD.length)).toEqual({ delivered: OK.length + SPAM.length, bounced: SPAM.length + HARD.length, suppressed: SUPP.length });
    // Paged through the whole record: exactly the sink's accepted recipients are delivered.
    const delivered = await rowsOf('delivered');
    expect(delivered.length).toBe(sinkAccepted());
    expect(delivered.map((r) => r[0]).sort()).toEqual([...OK, ...SPAM].sort((a, b) => a - b).map(addr));
    expect((await rowsOf('bounced')).map((r) => r[0]).sort()).toEqual(HARD.map(addr));
    await new Promise((res) => setTimeout(res, 500)); // nothing more may arrive
    for (let i = 0; i < N; i++) expect(accepted(addr(i)), addr(i)).toBe(kind(i) === 'unknown' || kind(i) === 'suppressed' ? 0 : 1);
    expect((await rowsOf('suppressed')).length).toBe(SUPP.length);
  }, 480_000);
});
