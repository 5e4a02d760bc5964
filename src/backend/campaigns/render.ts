/**
 * Turning a campaign into the message one recipient gets:
 * - every http(s) link of the HTML goes through the click redirect (`/t/c/:emailSendId/:encodedUrl`);
 * - a footer with the view-in-browser, preference-center and unsubscribe links, and the open
 *   pixel (`/t/o/:emailSendId`), go before `</body>`;
 * - `{{unsubscribe_url}}`, `{{preferences_url}}` and `{{archive_url}}` in the HTML or text are
 *   filled in (a designer's own footer).
 * The HTML is scanned once per campaign (compile); a recipient's copy is then a join of
 * fixed parts and freshly signed links.
 *
 * The link scan is a small hand-written pass over `href` attributes of <a> and <area>
 * instead of an HTML parser: a parser would re-serialize the customer's markup, and the
 * message must stay byte-for-byte as designed everywhere except in those attribute values.
 */
import { escapeHtml } from '../../shared/html.js';
import { isTrackableUrl, type LinkSigner } from '../public/tracked-links.js';

const HREF = /(<(?:a|area)\b[^>]*?\shref\s*=\s*)(?:"([^"]*)"|'([^']*)')/gi;
const PLACEHOLDER = /\{\{\s*(unsubscribe_url|preferences_url|archive_url)\s*\}\}/g;
const HAS_PLACEHOLDER = /\{\{\s*(unsubscribe_url|preferences_url|archive_url)\s*\}\}/;

const ENTITIES: Record<string, string> = { amp: '&', quot: '"', apos: "'", lt: '<', gt: '>', '#38': '&', '#x26': '&', '#39': "'", '#34': '"' };
const decodeEntities = (s: string): string => s.replace(/&(amp|quot|apos|lt|gt|#38|#x26|#39|#34);/gi, (m, e: string) => ENTITIES[e.toLowerCase()] ?? m);

export interface CompiledCampaign {
  /** HTML around the tracked links: parts.length === links.length + 1. */
  parts: string[];
  /** Where the footer goes in the last part (before its last `</body>`, else its end). */
  bodyEnd: number;
  /** The same pieces JSON-escaped (the MTA job is JSON; escaping them once per campaign, not per recipient). */
  json: { parts: string[]; tailBefore: string; tailAfter: string };
  /** The tracked links' URLs, entity-decoded (what the reader's browser would open). */
  links: string[];
  text: string | null;
  footerNames: { topic: string; organization: string };
  hasPlaceholders: boolean;
}

export function compileCampaign(html: string, text: string | null, names: { topic: string; organization: string }): CompiledCampaign {
  // parts[i] ends right after a tracked link's opening quote; parts[i + 1] starts at its closing quote.
  const parts: string[] = [];
  const links: string[] = [];
  let pos = 0;
  for (const m of html.matchAll(HREF)) {
    const raw = m[2] ?? m[3] ?? '';
    const url = decodeEntities(raw).trim();
    // Merge tags and our own placeholders are not links yet; mailto:, tel:, #anchors are not tracked.
    if (!isTrackableUrl(url) || url.includes('{{')) continue;
    const valueStart = m.index! + m[1]!.length + 1;
    parts.push(html.slice(pos, valueStart));
    links.push(url);
    pos = valueStart + raw.length;
  }
  parts.push(html.slice(pos));
  const tail = parts[parts.length - 1]!;
  const i = tail.toLowerCase().lastIndexOf('</body>');
  const bodyEnd = i < 0 ? tail.length : i;
  return {
    parts,
    bodyEnd,
    json: { parts: parts.map(jsonEscape), tailBefore: jsonEscape(tail.slice(0, bodyEnd)), tailAfter: jsonEscape(tail.slice(bodyEnd)) },
    links,
    text,
    footerNames: names,
    hasPlaceholders: HAS_PLACEHOLDER.test(html) || (text !== null && HAS_PLACEHOLDER.test(text)),
  };
}

export interface RecipientLinks {
  emailSendId: string;
  /** The message's link tag (LinkSigner.messageTag): every tracked link ends with it. */
  messageTag: string;
  unsubscribeUrl: string;
  preferencesUrl: string;
  archiveUrl: string;
  pixelUrl: string;
  /** `${baseUrl}/t/c/${emailSendId}/` */
  clickBase: string;
}

function fill(s: string, l: { unsubscribeUrl: string; preferencesUrl: string; archiveUrl: string }, escape: boolean): string {
  return s.replace(PLACEHOLDER, (_m, name: string) => {
    const v = name === 'unsubscribe_url' ? l.unsubscribeUrl : name === 'preferences_url' ? l.preferencesUrl : l.archiveUrl;
    return escape ? escapeHtml(v) : v;
  });
}

function footerHtml(c: CompiledCampaign, l: { unsubscribeUrl: string; preferencesUrl: string; archiveUrl: string } | null): string {
  const a = (href: string, label: string) => `<a href="${escapeHtml(href)}" style="color:#6b6b6b;text-decoration:underline">${label}</a>`;
  const links = l ? `<p style="margin:0">${a(l.archiveUrl, 'View in browser')} &middot; ${a(l.preferencesUrl, 'Manage preferences')} &middot; ${a(l.unsubscribeUrl, 'Unsubscribe')}</p>` : '';
  return (
    `<div style="margin:24px auto 0;padding:16px;max-width:600px;font:12px/1.5 Arial,Helvetica,sans-serif;color:#6b6b6b;text-align:center">` +
    `<p style="margin:0 0 8px">You are receiving this email because you subscribed to ${escapeHtml(c.footerNames.topic)} from ${escapeHtml(c.footerNames.organization)}.</p>` +
    `${links}</div>`
  );
}

function insertBeforeBodyEnd(html: string, addition: string): string {
  const i = html.toLowerCase().lastIndexOf('</body>');
  return i < 0 ? html + addition : html.slice(0, i) + addition + html.slice(i);
}

/** The content of a JSON string literal for `s` (no quotes). */
export const jsonEscape = (s: string): string => JSON.stringify(s).slice(1, -1);

/** The campaign-wide part of each tracked link (LinkSigner.urlPart), computed once per campaign. */
export function linkParts(c: CompiledCampaign, links: LinkSigner, group: string): string[] {
  return c.links.map((u) => links.urlPart(group, u));
}

export interface RenderedMessage {
  html: string;
  text: string | undefined;
  /** The same, JSON-escaped (for the MTA job body); html and text are empty when rendered jsonOnly. */
  htmlJson: string;
  textJson: string | undefined;
}

/**
 * One recipient's HTML and text. `parts`: linkParts() of this campaign. With `jsonOnly` the
 * raw forms are left empty (the MTA transport needs only the JSON-escaped ones).
 */
export function renderForRecipient(c: CompiledCampaign, l: RecipientLinks, parts: string[], jsonOnly = false): RenderedMessage {
  const pixel = `<img src="${l.pixelUrl}" width="1" height="1" alt="" style="display:block;width:1px;height:1px;border:0;margin:0;padding:0">`;
  const footer = footerHtml(c, l) + pixel;
  const footerJson = jsonEscape(footer);
  const n = c.links.length;
  const last = c.parts[n]!;
  // Click links are ASCII without quotes or backslashes: the same text in both forms.
  const build = (p: string[], before: string, foot: string, after: string): string => {
    let out = n === 0 ? '' : p[0]!;
    for (let i = 0; i < n; i++) {
      out += `${l.clickBase}${parts[i]}.${l.messageTag}`;
      if (i < n - 1) out += p[i + 1]!;
    }
    out += before + foot + after;
    // Placeholders are filled with HTML-escaped URLs: nothing in them to JSON-escape.
    return c.hasPlaceholders ? fill(out, l, true) : out;
  };
  const html = jsonOnly ? '' : build(c.parts, last.slice(0, c.bodyEnd), footer, last.slice(c.bodyEnd));
  const json = build(c.json.parts, c.json.tailBefore, footerJson, c.json.tailAfter);
  let text: string | undefined;
  if (c.text !== null) {
    text =
      (c.hasPlaceholders ? fill(c.text, l, false) : c.text) +
      `\n\n--\nView in browser: ${l.archiveUrl}\nManage preferences: ${l.preferencesUrl}\nUnsubscribe: ${l.unsubscribeUrl}\n`;
  }
  return { html, text: jsonOnly ? undefined : text, htmlJson: json, textJson: text === undefined ? undefined : jsonEscape(text) };
}

/**
 * The archive snapshot: the HTML as sent, without what belongs to one recipient (tracked
 * links, pixel, personal unsubscribe and preference links). Placeholders become "#".
 */
export function renderForArchive(c: CompiledCampaign): string {
  let html = c.parts[0]!;
  for (let i = 0; i < c.links.length; i++) html += escapeHtml(c.links[i]!) + c.parts[i + 1]!;
  if (c.hasPlaceholders) html = fill(html, { unsubscribeUrl: '#', preferencesUrl: '#', archiveUrl: '#' }, false);
  return insertBeforeBodyEnd(html, footerHtml(c, null));
}
