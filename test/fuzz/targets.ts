/**
 * Property-based fuzz targets for every parser we own (issue #25): the edge's input walk and
 * /send's body handling, the signed MTA event route's verification and translation, the
 * address grammar, MIME building and dot-stuffing, VERP/CFBL and signed tokens, template
 * rendering, the bounce classifier (parseReport, async, is fuzzed in test/shared/bounce/).
 * Each target is a fast-check property over real code (no mocks); `runs` is its
 * share of `npm run fuzz` (test/fuzz/run.ts, 1,000,000+ inputs with a fixed seed), and
 * test/fuzz/fuzz.test.ts runs a short slice of each in CI.
 *
 * Inputs lean on what breaks parsers: NUL, CR, LF, lone surrogates, quotes, backslashes,
 * angle brackets, dots at line starts, long lines, deep nesting.
 */
import fc from 'fast-check';
import { FeedbackFormatError } from '../../src/backend/feedback/lifecycle.js';
import { translateMta } from '../../src/backend/feedback/translate/mta.js';
import { VerificationError } from '../../src/backend/feedback/verify/common.js';
import { MTA_SCHEME, signTimestamped, verifyTimestampedHmac } from '../../src/backend/feedback/verify/hmac.js';
import { hasVariable, referencedVariables, render, type Variables } from '../../src/backend/api/template.js';
import { buildMessage } from '../../src/mta/delivery/mime.js';
import { dataBlock } from '../../src/mta/delivery/smtp.js';
import { parseVerpAddress, signToken, verifyToken, verpAddress } from '../../src/mta/delivery/verp.js';
import { readJobBody, storedJson } from '../../src/mta/routes/send.js';
import type { MtaJobPayload } from '../../src/mta/job.js';
import { EDGE_POLICY } from '../../src/shared/edge-policy.js';
import { findInputFault, textFault } from '../../src/shared/input.js';
import { domainOf, formatMailbox, normalizeAddress, parseMailbox } from '../../src/shared/mail/address.js';
import { isCfblHeader, isHeaderName, isReservedHeader } from '../../src/shared/mail/headers.js';
import { classify, isHardReason } from '../../src/shared/mail/bounce/classify.js';
import { BOUNCE_REASONS } from '../../src/shared/mail/bounce/types.js';
import { Signer } from '../../src/shared/signing.js';

export interface FuzzTarget {
  name: string;
  /** Inputs in the full run (`npm run fuzz`). */
  runs: number;
  property: fc.IRawProperty<any>;
}

// ------------------------------------------------------------------------------ inputs

/** A UTF-16 code unit, biased towards the ones that break things. */
const nasty = fc.constantFrom(0x00, 0x0a, 0x0d, 0x09, 0x20, 0x22, 0x27, 0x2e, 0x3c, 0x3e, 0x40, 0x5c, 0x7b, 0x7d, 0x7f, 0xa0, 0xfeff, 0xd800, 0xdbff, 0xdc00, 0xdfff);
const unit = fc.oneof({ arbitrary: fc.integer({ min: 0x20, max: 0x7e }), weight: 6 }, { arbitrary: nasty, weight: 3 }, { arbitrary: fc.integer({ min: 0, max: 0xffff }), weight: 2 }).map((c) => String.fromCharCode(c));
export const text = (maxLength = 40) => fc.string({ unit, maxLength });
/** Well-formed text (no lone surrogates): what a JSON body that passed the edge can hold. */
const wellFormed = (maxLength = 40, minLength = 0) =>
  fc.string({ unit, maxLength, minLength }).filter((s) => (s as unknown as { isWellFormed(): boolean }).isWellFormed());

/** JSON values with nasty strings and keys, up to a few levels; plus chains around the depth limit. */
const jsonTree = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constantFrom(null, true, false, 0, -1.5, 1e21),
    text(12),
    fc.array(tie('v'), { maxLength: 4 }),
    fc.dictionary(text(6), tie('v'), { maxKeys: 4 }),
  ),
})).v;
const chain = fc.tuple(fc.integer({ min: 0, max: EDGE_POLICY.maxJsonDepth + 40 }), fc.boolean(), text(4)).map(([depth, objects, leaf]) => {
  let v: unknown = leaf;
  for (let i = 0; i < depth; i++) v = objects ? { k: v } : [v];
  return v;
});
const jsonValue = fc.oneof(jsonTree, chain);

/** The reference: the first text fault and the depth, recursively (fine for these small values). */
function reference(v: unknown, depth = 0): { text: boolean; depth: number } {
  if (typeof v === 'string') return { text: textFault(v) !== null, depth };
  if (v === null || typeof v !== 'object') return { text: false, depth };
  let out = { text: false, depth: depth + 1 };
  const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
  for (const [k, x] of entries) {
    if (!Array.isArray(v) && textFault(k)) out.text = true;
    const r = reference(x, depth + 1);
    out = { text: out.text || r.text, depth: Math.max(out.depth, r.depth) };
  }
  return out;
}

const job = fc.record({
  messageId: wellFormed(20),
  to: fc.constantFrom('r@example.org', ' Mixed@Example.ORG ', 'x@bücher.example'),
  from: fc.constantFrom('a@sender.example', 'News <news@sender.example>'),
  subject: wellFormed(30),
  html: wellFormed(60),
  text: fc.option(wellFormed(30), { nil: undefined }),
  headers: fc.option(fc.dictionary(fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,12}$/), wellFormed(20), { maxKeys: 3 }), { nil: undefined }),
  ipPool: fc.constantFrom('transactional', 'campaign'),
  organizationId: wellFormed(10),
  dkimDomain: fc.constantFrom('sender.example'),
  engagementScore: fc.option(fc.oneof(fc.integer({ min: -5, max: 150 }), fc.double({ noNaN: true })), { nil: undefined }),
});

/** JSON text of a value written the ways clients write it: spacing, \u escapes, a byte order mark. */
const jsonText = (v: unknown) =>
  fc.tuple(fc.constantFrom(0, 2), fc.boolean(), fc.boolean()).map(([indent, escape, bom]) => {
    let s = JSON.stringify(v, null, indent);
    // Non-ASCII as \u escapes (control characters in strings are escaped by stringify already).
    if (escape) s = s.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
    return bom ? `\ufeff${s}` : s;
  });

/** Any bytes, or JSON text cut or flipped somewhere. */
const mangled = (texts: fc.Arbitrary<string>) =>
  fc.oneof(
    fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)),
    fc.tuple(texts, fc.nat(), fc.nat({ max: 255 })).map(([s, at, byte]) => {
      const b = Buffer.from(s, 'utf8');
      if (b.length) b[at % b.length] = byte;
      return b;
    }),
    fc.tuple(texts, fc.nat()).map(([s, at]) => Buffer.from(s.slice(0, at % (s.length + 1)), 'utf8')),
  );

const NOW = Date.UTC(2026, 10, 25, 12, 0, 0);
const iso = new Date(NOW).toISOString();
const mtaEvent = fc.record({
  id: fc.oneof(wellFormed(8), fc.constant('ev-1')),
  event: fc.constantFrom('sent', 'bounced', 'complained', 'inbound.received', 'ip.delisted', 'org.circuit_breaker', 'unknown.event', ''),
  timestamp: fc.constantFrom(iso, 'not a date', ''),
  data: fc.record(
    {
      messageId: fc.oneof(wellFormed(8), fc.constant(null)),
      organizationId: fc.constantFrom('org-1', ''),
      campaignId: fc.constant(null),
      recipient: fc.oneof(fc.constantFrom('r@example.org', 'bad', ''), text(10)),
      jobId: wellFormed(6),
      domain: fc.constant('example.org'),
      type: fc.constantFrom('hard', 'soft', 'x'),
      reason: fc.constantFrom('userunknown', 'MailboxFull', ''),
      smtpCode: fc.oneof(fc.constant(null), fc.integer({ min: 100, max: 700 })),
      enhancedCode: fc.oneof(fc.constant(null), fc.constantFrom('5.1.1', '9.9.9.9')),
      smtpResponse: fc.oneof(fc.constant(null), text(20)),
      tls: fc.boolean(),
      attempt: fc.integer({ min: -1, max: 3 }),
      ip: fc.constantFrom('127.0.0.2'),
      pool: fc.constant(null),
      mxHost: fc.constant(null),
      feedbackType: fc.constant('abuse'),
      from: fc.constantFrom('a@b.example', ''),
      to: fc.array(fc.constantFrom('r@example.org', 'bad'), { maxLength: 2 }),
      subject: text(10),
      text: fc.constant(null),
      html: fc.constant(null),
      inReplyTo: fc.constant(null),
      references: fc.constant([]),
      receivedAt: fc.constant(iso),
      zone: fc.constant('z.example'),
      pools: fc.constant([]),
      at: fc.constant(iso),
      extra: jsonValue,
    },
    { requiredKeys: [] },
  ),
});

// ------------------------------------------------------------------------------ targets

const SECRET = 'fuzz-secret-0123456789';
const VERP_KEY = 'verp-key-0123456789abcdef';

export const TARGETS: FuzzTarget[] = [
  {
    name: 'edge input walk (findInputFault)',
    runs: 300_000,
    property: fc.property(jsonValue, (v) => {
      const ref = reference(v);
      const f = findInputFault(v, 'body');
      const tooDeep = ref.depth > EDGE_POLICY.maxJsonDepth;
      if (!tooDeep && !ref.text) return f === null;
      // Either fault may be found first; each must be one the value really has.
      return f !== null && ((f.reason === 'too_deep' && tooDeep) || (f.reason === 'invalid_text' && ref.text));
    }),
  },
  {
    name: '/send body (readJobBody, storedJson)',
    runs: 200_000,
    property: fc.property(
      fc.oneof(job.chain((j) => jsonText(j).map((t) => ({ j, raw: Buffer.from(t, 'utf8') }))), mangled(job.map((j) => JSON.stringify(j))).map((raw) => ({ j: null, raw }))),
      ({ j, raw }) => {
        const r = readJobBody(raw); // never throws
        if (j === null || r.kind !== 'parsed') return j === null || r.kind !== 'fastify';
        const value = r.value as Record<string, unknown>;
        // The stored text parses to the body with the normalised fields appended (JSON's last key wins).
        const added = { to: 'n@example.org', dkimDomain: 'sender.example', engagementScore: null, recipient: 'n@example.org', domain: 'example.org', band: 'default', acceptedAt: NOW };
        const stored = storedJson(r.raw, { ...value, ...added } as unknown as MtaJobPayload);
        return stored === undefined || sameJson(JSON.parse(stored.toString('utf8')), JSON.parse(JSON.stringify({ ...value, ...added })));
      },
    ),
  },
  {
    name: 'signed MTA events (verify, translateMta)',
    runs: 150_000,
    property: fc.property(
      fc.oneof(
        fc.oneof(mtaEvent, fc.array(mtaEvent, { maxLength: 3 })).chain((e) => jsonText(e).map((t) => Buffer.from(t.replace(/^\ufeff/, ''), 'utf8'))),
        mangled(mtaEvent.map((e) => JSON.stringify(e))),
      ),
      fc.oneof(fc.constant('valid'), fc.constant('repeated'), text(70)),
      (body, sig) => {
        const ts = String(NOW / 1000);
        const good = signTimestamped(SECRET, ts, body);
        const headers = { 'x-mta-timestamp': [ts], 'x-mta-signature': sig === 'valid' ? [good] : sig === 'repeated' ? [good, good] : [sig] };
        try {
          verifyTimestampedHmac(MTA_SCHEME, { secret: SECRET, body, headers, nowMs: NOW });
          if (sig !== 'valid' && sig.toLowerCase() !== good) return false; // only the right signature verifies
        } catch (err) {
          if (!(err instanceof VerificationError) || sig === 'valid') return false;
        }
        try {
          const t = translateMta(body, NOW);
          return Array.isArray(t.events);
        } catch (err) {
          return err instanceof FeedbackFormatError; // a 400 invalid_payload, never a 500
        }
      },
    ),
  },
  {
    name: 'address grammar (parseMailbox, normalizeAddress, formatMailbox)',
    runs: 400_000,
    property: fc.property(
      fc.oneof(
        text(60),
        fc.tuple(text(8), fc.stringMatching(/^[A-Za-z0-9.+_-]{0,12}$/), fc.constantFrom('example.com', 'Bücher.Example', 'xn--bcher-kva.example', '1.2.3.4', 'a..b', 'EXAMPLE.ORG ', 'b.c'), fc.constantFrom('', '"', '<', ' ')).map(
          ([name, local, domain, q]) => `${q}${name}${q} <${local}@${domain}>`,
        ),
        fc.tuple(fc.stringMatching(/^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{0,70}$/), fc.constantFrom('@example.com', '@a.b', '@ex ample.com', '@', '@xn--zz.example', '@exämple.com')).map(([l, d]) => l + d),
      ),
      (input) => {
        const n = normalizeAddress(input);
        if (n !== null) {
          if (n.length > 254 || /[^\x21-\x7e]/.test(n) || normalizeAddress(n) !== n) return false;
          if (domainOf(n) !== n.slice(n.lastIndexOf('@') + 1)) return false;
        }
        const m = parseMailbox(input);
        if (m === null) return true;
        if (/[\r\n\0]/.test(m.address + (m.name ?? '')) || normalizeAddress(m.address) !== m.address) return false;
        const again = parseMailbox(formatMailbox(m));
        return again !== null && again.address === m.address && again.name === m.name;
      },
    ),
  },
  {
    name: 'MIME building and dot-stuffing (buildMessage, dataBlock)',
    runs: 150_000,
    property: fc.property(
      fc.record({
        subject: fc.oneof(text(120), fc.tuple(text(4), fc.nat({ max: 998 })).map(([t, n]) => (t + 'x'.repeat(n)).slice(0, 998))),
        name: text(20),
        html: fc.oneof(text(200), fc.array(fc.oneof(text(20), fc.constantFrom('.', '\r\n.', '\n.\n', '\r', '.\r\n', 'x'.repeat(1200))), { maxLength: 6 }).map((a) => a.join(''))),
        text: fc.option(fc.array(fc.oneof(text(20), fc.constantFrom('.', '\r\n.\r\n', '\n', 'y'.repeat(1100))), { maxLength: 6 }).map((a) => a.join('')), { nil: undefined }),
        headers: fc.dictionary(
          fc.oneof(fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,20}$/), text(10), fc.constantFrom('Bcc', 'bcc', 'DKIM-Signature', 'Content-Type', 'X-A')),
          fc.oneof(text(80), fc.tuple(text(4), fc.nat({ max: 998 })).map(([t, n]) => (t + 'v'.repeat(n)).slice(0, 998))),
          { maxKeys: 4 },
        ),
        eightBit: fc.boolean(),
      }),
      (m) => {
        const built = buildMessage(
          { messageId: 'm', organizationId: 'o', from: `${JSON.stringify(m.name.replace(/[\r\n\0]/g, ''))} <a@sender.example>`, to: 'r@example.org', subject: m.subject, html: m.html, text: m.text, headers: m.headers, dkimDomain: 'sender.example' },
          { messageIdHeader: '<id@sender.example>', date: NOW, eightBit: m.eightBit },
        );
        const wire = built.wire;
        // Only CRLF line breaks, every line within SMTP's 998 octets (+ CRLF), 7-bit unless 8BITMIME.
        if (/\r(?!\n)|(?<!\r)\n/.test(wire)) return false;
        if (wire.split('\r\n').some((l) => l.length > 998)) return false;
        // RFC 2045 7bit: no octet above 127 and no NUL (other controls are allowed).
        if (!m.eightBit && (/[\u0080-\uffff]/.test(wire) || wire.includes('\0'))) return false;
        // No injected header: the top-level fields are ours plus the caller's allowed ones, each once.
        const head = wire.slice(0, wire.indexOf('\r\n\r\n'));
        const names = head.split('\r\n').filter((l) => !/^[ \t]/.test(l)).map((l) => l.slice(0, l.indexOf(':')).toLowerCase());
        const allowed = new Set(['from', 'to', 'subject', 'date', 'message-id', 'mime-version', 'content-type', 'content-transfer-encoding']);
        const callers = Object.keys(m.headers).filter((h) => isHeaderName(h) && !isReservedHeader(h) && !isCfblHeader(h)).map((h) => h.toLowerCase());
        for (const n of names) if (!allowed.has(n) && !callers.includes(n)) return false;
        for (const own of ['from', 'to', 'subject', 'date', 'message-id', 'mime-version']) if (names.filter((n) => n === own).length !== 1) return false;
        // Dot-stuffing: one terminator, at the end; un-stuffing gives the message back.
        const block = dataBlock(wire).toString('latin1');
        if (!block.endsWith('\r\n.\r\n') || block.slice(0, -3).includes('\r\n.\r\n') || block.startsWith('.\r\n')) return false;
        const unstuffed = block.slice(0, -3).replace(/^\./, '').replace(/\r\n\./g, '\r\n');
        return unstuffed === (wire.endsWith('\r\n') ? wire : `${wire}\r\n`);
      },
    ),
  },
  {
    name: 'SMTP DATA block (dataBlock of text and of pieces)',
    runs: 250_000,
    property: fc.property(fc.array(fc.oneof(text(30), fc.constantFrom('.', '\r\n', '\r\n.', '.\r\n', '\r', '\n', '\r\n.\r\n')), { maxLength: 6 }), (parts) => {
      const latin1 = parts.map((p) => Buffer.from(p, 'utf8').toString('latin1'));
      const whole = dataBlock(latin1.join('')).toString('latin1');
      // The pieces path (DKIM fields + message) gives exactly the block of the joined text.
      if (dataBlock(latin1).toString('latin1') !== whole) return false;
      const body = whole.slice(0, -3);
      if (!whole.endsWith('.\r\n') || (body !== '' && !body.endsWith('\r\n')) || /\r(?!\n)|(?<!\r)\n/.test(body)) return false;
      // No line of the body is a lone dot: the terminator cannot be smuggled in.
      return !body.split('\r\n').includes('.') && !body.startsWith('.\r\n');
    }),
  },
  {
    name: 'VERP and CFBL tokens (signToken, verifyToken, parseVerpAddress)',
    runs: 250_000,
    property: fc.property(wellFormed(30, 1), fc.constantFrom('bounce' as const, 'cfbl' as const), fc.oneof(text(40), fc.constant('')), fc.nat(), (id, purpose, noise, at) => {
      const token = signToken(id, VERP_KEY, purpose);
      const ok = verifyToken(token, VERP_KEY, purpose);
      if (ok?.id !== id || !ok.verified || ok.legacy) return false;
      if (verifyToken(token, VERP_KEY, purpose === 'bounce' ? 'cfbl' : 'bounce') !== null) return false;
      if (verifyToken(token, 'another-key-0123456789', purpose) !== null) return false;
      if (purpose === 'bounce' && parseVerpAddress(verpAddress(id, VERP_KEY, 'Bounce.Example'), { key: VERP_KEY, bounceHost: 'bounce.example' })?.id !== id) return false;
      // Anything else verifies only if it is the token itself.
      const mutated = token.slice(0, at % (token.length + 1)) + noise + token.slice(at % (token.length + 1));
      const r = verifyToken(mutated, VERP_KEY, purpose);
      return r === null || mutated === token || (r.verified && signToken(r.id, VERP_KEY, purpose) === mutated);
    }),
  },
  {
    name: 'bounce classifier (classify)',
    runs: 100_000,
    property: fc.property(
      fc.oneof(text(200), fc.constantFrom('550 5.1.1 user unknown', '452-4.2.2 quota\n452 4.2.2 full', '(in reply to RCPT TO command)', '')),
      fc.oneof(fc.constant(null), fc.constantFrom('5.1.1', '4.2.2', '2.0.0', '5.0.0', '5.1.10', '4.7.28'), text(8)),
      fc.oneof(fc.constant(null), fc.integer({ min: -1, max: 1000 })),
      fc.oneof(fc.constant(null), text(30), fc.constantFrom('gmail-smtp-in.l.google.com', 'x.protection.outlook.com')),
      (t, status, replyCode, remoteHost) => {
        const r = classify({ text: t, status, replyCode, remoteHost });
        // Only the vocabulary; hard only for a hard reason.
        return (BOUNCE_REASONS as readonly string[]).includes(r.reason) && typeof r.hardBounce === 'boolean' && (!r.hardBounce || isHardReason(r.reason));
      },
    ),
  },
  {
    name: 'signed tokens (Signer.verify)',
    runs: 100_000,
    property: fc.property(jsonTree, fc.oneof(text(6), fc.constant('')), fc.nat(), (data, noise, at) => {
      const signer = SIGNER;
      const token = signer.sign('fuzz', data);
      const ok = signer.verify('fuzz', token, NOW);
      if (!ok.ok || JSON.stringify(ok.data) !== JSON.stringify(data)) return false;
      if (signer.verify('other', token, NOW).ok) return false;
      const mutated = token.slice(0, at % (token.length + 1)) + noise + token.slice(at % (token.length + 1));
      return !signer.verify('fuzz', mutated, NOW).ok || mutated === token;
    }),
  },
  {
    name: 'template rendering (render, referencedVariables)',
    runs: 200_000,
    property: fc.property(
      fc.array(fc.oneof(text(10), fc.constantFrom('constructor', 'toString', '__proto__', 'valueOf', 'name', 'a.b', 'x-y').map((n) => `{{ ${n} }}`), fc.constantFrom('{{', '}}', '{{}}', '{{ 9 }}')), { maxLength: 8 }).map((a) => a.join('')),
      fc.dictionary(fc.constantFrom('constructor', 'toString', 'name', 'a.b', 'other'), fc.oneof(text(10), fc.integer(), fc.boolean(), fc.constant(null)), { maxKeys: 3 }),
      fc.boolean(),
      (template, dict, html) => {
        const vars = JSON.parse(JSON.stringify(dict)) as Variables; // as a request body arrives
        const out = render(template, vars, html);
        if (out.includes('[native code]') && !template.includes('[native code]')) return false;
        const refs = [...referencedVariables(template)];
        if (refs.length === 0 && out !== template) return false;
        if (html && (out.match(/</g)?.length ?? 0) > (template.match(/</g)?.length ?? 0)) return false;
        // Only own properties are variables: a missing one renders as an empty value would.
        const filled = Object.assign(Object.create(null) as Variables, vars);
        for (const n of refs) if (!hasVariable(vars, n)) filled[n] = '';
        return out === render(template, filled, html);
      },
    ),
  },
];

const SIGNER = new Signer(Buffer.alloc(32, 7));

function sameJson(a: unknown, b: unknown): boolean {
  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null) return a === b;
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

export const FUZZ_SEED = 20261125;
