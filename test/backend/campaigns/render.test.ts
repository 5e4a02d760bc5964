import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { compileCampaign, jsonEscape, linkParts, renderForArchive, renderForRecipient } from '../../../src/backend/campaigns/render.js';
import { LinkSigner } from '../../../src/backend/public/tracked-links.js';
import { Signer } from '../../../src/shared/signing.js';

const links = new LinkSigner(new Signer(randomBytes(32)));
const recipient = (id: string) => ({
  emailSendId: id,
  messageTag: links.messageTag('cmp_1', id),
  unsubscribeUrl: `https://m.example/unsub/tok-${id}`,
  preferencesUrl: `https://m.example/prefs/tok-${id}`,
  archiveUrl: 'https://m.example/archive/ARCH',
  pixelUrl: `https://m.example/t/o/${id}`,
  clickBase: `https://m.example/t/c/${id}/`,
});

describe('campaign rendering', () => {
  const html = `<html><body><p class="q">Quote " and back\\slash, ünïcødé ✓</p>
<a href="https://a.example/x?y=1&amp;z=2">one</a> <A HREF='https://b.example/'>two</A> <a href="mailto:x@y.example">mail</a>
<a href="https://c.example/{{first_name}}">merge</a> <a href="{{unsubscribe_url}}">leave</a> <area shape="rect" href="http://d.example/map">
</BODY></html>`;
  const c = compileCampaign(html, 'Plain "text"\\ {{preferences_url}}', { topic: 'News & "more"', organization: 'Acme\\Co' });

  it('finds the trackable links (http/https in <a> and <area>), not mailto, merge tags or placeholders', () => {
    expect(c.links).toEqual(['https://a.example/x?y=1&z=2', 'https://b.example/', 'http://d.example/map']);
    expect(c.hasPlaceholders).toBe(true);
  });

  it('rewrites each link to a click URL that verifies for that send only; keeps the rest byte for byte', () => {
    const parts = linkParts(c, links, 'cmp_1');
    const r = renderForRecipient(c, recipient('es_1'), parts);
    const clicks = [...r.html.matchAll(/https:\/\/m\.example\/t\/c\/es_1\/([^"']+)/g)].map((m) => m[1]!);
    expect(clicks.map((e) => links.decode('es_1', e))).toEqual(c.links);
    expect(clicks.map((e) => links.decode('es_2', e))).toEqual([null, null, null]);
    expect(r.html).toContain('<p class="q">Quote " and back\\slash, ünïcødé ✓</p>');
    expect(r.html).toContain('href="mailto:x@y.example"');
    expect(r.html).toContain('href="https://c.example/{{first_name}}"');
    expect(r.html).toContain('<a href="https://m.example/unsub/tok-es_1">leave</a>');
    // Footer and pixel before </BODY>.
    expect(r.html).toMatch(/Unsubscribe<\/a><\/p><\/div><img src="https:\/\/m\.example\/t\/o\/es_1" width="1" height="1"[^>]*>\n?<\/BODY><\/html>$/);
    expect(r.html).toContain('News &amp; &quot;more&quot; from Acme\\Co');
    expect(r.text).toBe('Plain "text"\\ https://m.example/prefs/tok-es_1\n\n--\nView in browser: https://m.example/archive/ARCH\nManage preferences: https://m.example/prefs/tok-es_1\nUnsubscribe: https://m.example/unsub/tok-es_1\n');
  });

  it('the JSON-escaped form is exactly the escaped HTML and text', () => {
    const r = renderForRecipient(c, recipient('es_3'), linkParts(c, links, 'cmp_1'));
    expect(r.htmlJson).toBe(jsonEscape(r.html));
    expect(r.textJson).toBe(jsonEscape(r.text!));
    expect(JSON.parse(`"${r.htmlJson}"`)).toBe(r.html);
    const bare = compileCampaign('<p>no body tag, no links</p>', null, { topic: 't', organization: 'o' });
    const b = renderForRecipient(bare, recipient('es_4'), []);
    expect(b.html.startsWith('<p>no body tag, no links</p><div')).toBe(true);
    expect(b.htmlJson).toBe(jsonEscape(b.html));
    expect(b.text).toBeUndefined();
  });

  it('the archive has the original links and no personal parts', () => {
    const a = renderForArchive(c);
    expect(a).toContain('href="https://a.example/x?y=1&amp;z=2"');
    expect(a).not.toContain('/t/c/');
    expect(a).not.toContain('/t/o/');
    expect(a).toContain('<a href="#">leave</a>');
  });
});
