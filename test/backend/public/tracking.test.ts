import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSigner } from '../../../src/shared/signing.js';
import { LinkSigner } from '../../../src/backend/public/tracked-links.js';
import { PIXEL_GIF } from '../../../src/backend/public/tracking.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { call, eventually, seedTrackedSends, startBackend, type Backend } from './helpers.js';

const HUMAN_UA = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15';
const APPLE_MPP_UA = 'Mozilla/5.0';
const GMAIL_PROXY_UA = 'Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)';
const SCANNER_UA = 'Mozilla/5.0 (compatible; Barracuda Sentinel; +https://barracuda.com)';

describe('open and click tracking', () => {
  const clock = new ManualClock();
  let b: Backend;
  let signer: LinkSigner;
  const row = async (id: string) =>
    (await b.app.db.pool.query('SELECT * FROM email_engagement WHERE email_send_id = $1', [id])).rows[0];

  beforeAll(async () => {
    b = await startBackend({ clock });
    signer = new LinkSigner(await loadSigner(b.app.db.pool));
    const at = clock.now();
    await b.app.db.pool.query(
      `INSERT INTO contacts (id, email, source, created_at, updated_at) VALUES ('con_1', 'b@x.test', 'api', $1, $1)`,
      [new Date(at).toISOString()],
    );
    const base = { contactId: 'con_1', campaignId: 'cmp_1', sentAt: at };
    await seedTrackedSends(b.app.db.pool, [
      { ...base, id: 'snd_open1', to: 'a@x.test' },
      { ...base, id: 'snd_open2', to: 'b@x.test' },
      { ...base, id: 'snd_click1', to: 'c@x.test' },
      { ...base, id: 'snd_click2', to: 'd@x.test' },
    ]);
  });
  afterAll(() => b?.close());

  it('the pixel is a 1×1 GIF with no-cache headers, for known and unknown ids alike', async () => {
    for (const id of ['snd_open1', 'snd_unknown', 'not a valid id!']) {
      const res = await fetch(`${b.url}/t/o/${encodeURIComponent(id)}`, { headers: { 'user-agent': HUMAN_UA } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('image/gif');
      expect(res.headers.get('cache-control')).toContain('no-store');
      expect(res.headers.get('cache-control')).toContain('no-cache');
      expect(res.headers.get('pragma')).toBe('no-cache');
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.equals(PIXEL_GIF)).toBe(true);
      expect(bytes.subarray(0, 6).toString()).toBe('GIF89a');
      expect(bytes.readUInt16LE(6)).toBe(1); // width
      expect(bytes.readUInt16LE(8)).toBe(1); // height
    }
  });

  it('records first and total opens in batches; machine opens are flagged, not dropped; email.opened once', async () => {
    const t0 = clock.now();
    clock.advance(60_000);
    await fetch(`${b.url}/t/o/snd_open2`, { headers: { 'user-agent': APPLE_MPP_UA } });
    clock.advance(60_000);
    await fetch(`${b.url}/t/o/snd_open2`, { headers: { 'user-agent': HUMAN_UA } });
    clock.advance(60_000);
    await fetch(`${b.url}/t/o/snd_open2`, { headers: { 'user-agent': GMAIL_PROXY_UA } });
    await fetch(`${b.url}/t/o/snd_open2`, { headers: { 'user-agent': HUMAN_UA } });
    const r = await eventually(async () => {
      const x = await row('snd_open2');
      return x?.opens === 4 && x;
    });
    expect(r.machine_opens).toBe(1);
    expect(r.proxy_opens).toBe(1);
    expect(r.first_open_at.getTime()).toBe(t0 + 60_000);
    expect(r.first_human_open_at.getTime()).toBe(t0 + 120_000);
    expect(r.last_open_at.getTime()).toBe(t0 + 180_000);

    // The recorder emits after its batch commits, so the row can be visible a moment before the event.
    await eventually(async () => b.events.some((e) => e.name === 'email.opened' && (e.data as any).emailId === 'snd_open2'));
    const opened = b.events.filter((e) => e.name === 'email.opened' && (e.data as any).emailId === 'snd_open2');
    expect(opened).toHaveLength(1);
    expect(opened[0]!.data).toMatchObject({
      emailId: 'snd_open2',
      to: 'b@x.test',
      from: 'news@acme.test',
      subject: 'News',
      messageId: '<snd_open2@acme.test>',
      contactId: 'con_1',
      campaignId: 'cmp_1',
      type: 'campaign',
      openedAt: new Date(t0 + 120_000).toISOString(),
      userAgent: HUMAN_UA,
    });
    // Unknown ids created nothing.
    expect(await row('snd_unknown')).toBeUndefined();
  });

  it('a click redirects with 302 only to URLs signed for that send', async () => {
    const url = 'https://shop.example.com/sale?utm_source=news&x=1#top';
    const enc = signer.encode('snd_click1', url);
    const ok = await call(b.url, 'GET', `/t/c/snd_click1/${enc}`, { headers: { 'user-agent': HUMAN_UA } });
    expect(ok.status).toBe(302);
    expect(ok.headers.get('location')).toBe(url);
    expect(ok.headers.get('cache-control')).toContain('no-store');

    // The same encoded URL under another send id, a tampered URL, a bare URL: not found, no redirect.
    const other = await call(b.url, 'GET', `/t/c/snd_click2/${enc}`);
    expect(other.status).toBe(404);
    expect(other.headers.get('location')).toBeNull();
    expect(other.body).toEqual({ error: { message: 'Link not found', category: 'not_found', data: { reason: 'link_not_found' } } });
    const [, tag] = enc.split('.');
    const evil = `${Buffer.from('https://evil.example/').toString('base64url')}.${tag}`;
    expect((await call(b.url, 'GET', `/t/c/snd_click1/${evil}`)).status).toBe(404);
    expect((await call(b.url, 'GET', `/t/c/snd_click1/${encodeURIComponent('https://evil.example/')}`)).status).toBe(404);
    expect((await call(b.url, 'GET', `/t/c/snd_click1/${Buffer.from(url).toString('base64url')}`)).status).toBe(404);
  });

  it('flags scanner, HEAD, too-fast and burst clicks; human clicks emit email.clicked', async () => {
    expect(await row('snd_click2')).toBeUndefined(); // created by the first hit
    const sentAt = (await b.app.db.pool.query('SELECT created_at FROM email_sends WHERE id = $1', ['snd_click2'])).rows[0].created_at.getTime();
    clock.set(sentAt + 2_000); // two seconds after sending: a scanner walking the links
    const a = 'https://a.example/one';
    const c = 'https://c.example/two';
    const ea = signer.encode('snd_click2', a);
    const ec = signer.encode('snd_click2', c);
    expect((await call(b.url, 'GET', `/t/c/snd_click2/${ea}`, { headers: { 'user-agent': HUMAN_UA } })).status).toBe(302);
    clock.set(sentAt + 300_000);
    expect((await call(b.url, 'GET', `/t/c/snd_click2/${ea}`, { headers: { 'user-agent': SCANNER_UA } })).status).toBe(302);
    const head = await fetch(`${b.url}/t/c/snd_click2/${ea}`, { method: 'HEAD', redirect: 'manual', headers: { 'user-agent': HUMAN_UA } });
    expect(head.status).toBe(302);
    clock.set(sentAt + 600_000);
    expect((await call(b.url, 'GET', `/t/c/snd_click2/${ea}`, { headers: { 'user-agent': HUMAN_UA } })).status).toBe(302);
    clock.set(sentAt + 600_500); // another link half a second later: a scanner, not a person
    expect((await call(b.url, 'GET', `/t/c/snd_click2/${ec}`, { headers: { 'user-agent': HUMAN_UA } })).status).toBe(302);

    const clicks = await eventually(async () => {
      const r = await b.app.db.pool.query('SELECT url, machine, reason FROM email_clicks WHERE email_send_id = $1 ORDER BY clicked_at, id', ['snd_click2']);
      return r.rows.length === 5 && r.rows;
    });
    expect(clicks.map((c: any) => [c.url, c.machine, c.reason])).toEqual([
      [a, true, 'too_fast'],
      [a, true, expect.stringMatching(/^(scanner|head_request)$/)],
      [a, true, expect.stringMatching(/^(scanner|head_request)$/)],
      [a, false, null],
      [c, true, 'burst'],
    ]);
    const agg = await row('snd_click2');
    expect(agg.clicks).toBe(5);
    expect(agg.machine_clicks).toBe(4);
    expect(agg.first_click_at.getTime()).toBe(sentAt + 2_000);
    expect(agg.first_human_click_at.getTime()).toBe(sentAt + 600_000);
    expect(agg.last_click_url).toBe(c);

    await eventually(async () => b.events.some((e) => e.name === 'email.clicked' && (e.data as any).emailId === 'snd_click2'));
    const clicked = b.events.filter((e) => e.name === 'email.clicked' && (e.data as any).emailId === 'snd_click2');
    expect(clicked).toHaveLength(1);
    expect(clicked[0]!.data).toMatchObject({ url: a, clickedAt: new Date(sentAt + 600_000).toISOString(), userAgent: HUMAN_UA });
  });
});

describe('tracking on shutdown', () => {
  it('a clean shutdown writes every buffered hit', async () => {
    const clock = new ManualClock();
    const b = await startBackend({ clock });
    const db = b.app.db;
    try {
      const signer = new LinkSigner(await loadSigner(db.pool));
      await seedTrackedSends(db.pool, [{ id: 'snd_s1', to: 'e@x.test', type: 'transactional', sentAt: clock.now() }]);
      clock.advance(3_600_000);
      const enc = signer.encode('snd_s1', 'https://example.org/');
      await Promise.all([
        ...Array.from({ length: 25 }, () => fetch(`${b.url}/t/o/snd_s1`, { headers: { 'user-agent': HUMAN_UA } })),
        ...Array.from({ length: 7 }, () => fetch(`${b.url}/t/c/snd_s1/${enc}`, { redirect: 'manual', headers: { 'user-agent': HUMAN_UA } })),
      ]);
      // Stop right away (the flush interval has not passed): stop() must write the buffer.
      await b.app.stop();
      const pool = (await import('../../../src/shared/db/pool.js')).createPool(db.url, { max: 1 });
      const r = (await pool.query('SELECT opens, clicks FROM email_engagement WHERE email_send_id = $1', ['snd_s1'])).rows[0];
      const n = (await pool.query('SELECT count(*)::int AS n FROM email_clicks WHERE email_send_id = $1', ['snd_s1'])).rows[0].n;
      await pool.end();
      expect(r).toEqual({ opens: 25, clicks: 7 });
      expect(n).toBe(7);
    } finally {
      await db.drop();
    }
  });
});
