/**
 * The one bounce classifier: an enhanced status, a reply code and a diagnostic text in, a
 * reason of Sisimai's vocabulary and a hard/soft flag out. The rules are data
 * (reasons.toml, next to this module in src/ and in dist/), read and compiled once: each
 * reason's patterns become one regular expression, so a verdict costs at most one test per
 * reason, never one per pattern.
 */
import { readFileSync } from 'node:fs';
import { parse as parseToml } from 'smol-toml';
import { BOUNCE_REASONS, type BounceReason, type Classification } from './types.js';

export const RULES_FILE = new URL('./reasons.toml', import.meta.url);

interface ReasonSpec {
  status_decides?: boolean;
  needs_status?: boolean;
  unless_text?: string[];
  not_status?: string[];
  also_text?: string[];
  text_commands?: string[];
  text_status?: string[];
  not_commands?: string[];
  reply_codes?: number[];
  status_decides_with_text?: boolean;
  text?: string[];
  in_order?: string[][];
  regex?: string[];
  not_text?: string[];
}

interface RulesFile {
  hard: string[];
  soft_when_temporary: string[];
  order: { first: string[]; second: string[]; retry: string[] };
  status: Record<string, string>;
  reasons: Record<string, ReasonSpec>;
  rhost?: Record<string, { hosts: string[]; reasons: Record<string, string[]> }>;
  tokens?: Record<string, string[]>;
  token_patterns?: Record<string, string[]>;
}

interface Rhost {
  hosts: string[];
  reasons: { reason: BounceReason; re: RegExp }[];
}

interface Compiled {
  reason: BounceReason;
  spec: ReasonSpec;
  re: RegExp | null;
  not: RegExp | null;
}

export interface Rules {
  hard: ReadonlySet<BounceReason>;
  softWhenTemporary: ReadonlySet<BounceReason>;
  first: Compiled[];
  second: Compiled[];
  retry: ReadonlySet<string>;
  status: ReadonlyMap<string, BounceReason>;
  byName: ReadonlyMap<string, Compiled>;
  rhosts: Rhost[];
  tokens: { reason: BounceReason; re: RegExp }[];
}

const KNOWN: ReadonlySet<string> = new Set(BOUNCE_REASONS);
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function reasonName(v: unknown, where: string): BounceReason {
  if (typeof v !== 'string' || !KNOWN.has(v)) throw new Error(`bounce rules: ${where}: "${String(v)}" is not a reason of the vocabulary`);
  return v as BounceReason;
}

function alternation(spec: ReasonSpec): RegExp | null {
  const parts = [
    ...(spec.text ?? []).map((s) => escape(s.toLowerCase())),
    ...(spec.in_order ?? []).map((group) => group.map((s) => escape(s.toLowerCase())).join('[\\s\\S]*?')),
    ...(spec.regex ?? []),
  ];
  return parts.length ? new RegExp(parts.join('|'), 'i') : null;
}

/** Validates and compiles a rules document; throws naming the first fault. */
export function compileRules(doc: RulesFile): Rules {
  const byName = new Map<string, Compiled>();
  for (const [name, spec] of Object.entries(doc.reasons ?? {})) {
    const reason = reasonName(name, 'reasons');
    for (const other of [...(spec.unless_text ?? []), ...(spec.also_text ?? [])]) reasonName(other, `reasons.${name}`);
    byName.set(name, {
      reason,
      spec,
      re: alternation(spec),
      not: spec.not_text?.length ? new RegExp(spec.not_text.map((s) => escape(s.toLowerCase())).join('|'), 'i') : null,
    });
  }
  const list = (names: string[], where: string) =>
    names.map((n) => byName.get(reasonName(n, where)) ?? { reason: n as BounceReason, spec: {}, re: null, not: null });
  const status = new Map<string, BounceReason>();
  for (const [code, name] of Object.entries(doc.status ?? {})) status.set(code, reasonName(name, `status.${code}`));
  return {
    hard: new Set(doc.hard.map((n) => reasonName(n, 'hard'))),
    softWhenTemporary: new Set((doc.soft_when_temporary ?? []).map((n) => reasonName(n, 'soft_when_temporary'))),
    first: list(doc.order.first, 'order.first'),
    second: list(doc.order.second, 'order.second'),
    retry: new Set(doc.order.retry),
    status,
    byName,
    tokens: [
      ...Object.entries(doc.tokens ?? {}).map(([reason, texts]) => ({
        reason: reasonName(reason, 'tokens'),
        re: new RegExp(texts.map((t) => escape(t.toLowerCase())).join('|'), 'i'),
      })),
      ...Object.entries(doc.token_patterns ?? {}).map(([reason, res]) => ({
        reason: reasonName(reason, 'token_patterns'),
        re: new RegExp(res.join('|'), 'i'),
      })),
    ],
    rhosts: Object.entries(doc.rhost ?? {}).map(([name, h]) => ({
      hosts: h.hosts.map((x) => x.toLowerCase()),
      reasons: Object.entries(h.reasons).map(([reason, texts]) => ({
        reason: reasonName(reason, `rhost.${name}`),
        re: new RegExp(texts.map((t) => escape(t.toLowerCase())).join('|'), 'i'),
      })),
    })),
  };
}

export function loadRules(file: URL | string = RULES_FILE): Rules {
  return compileRules(parseToml(readFileSync(file, 'utf8')) as unknown as RulesFile);
}

let loaded: Rules | undefined;
/** The shipped rules, compiled on first use and kept. */
export function rules(): Rules {
  return (loaded ??= loadRules());
}

export interface ClassifyInput {
  /** Enhanced status code, e.g. "5.1.1". */
  status?: string | null;
  /** Basic reply code, e.g. 550. */
  replyCode?: number | null;
  /** Diagnostic text (may contain the reply and status codes too). */
  text?: string | null;
  /** RFC 3464 Action, when known (a delayed report with nothing else is `expired`). */
  action?: string | null;
  /** The SMTP command the reply answered; read from the text when not given. */
  command?: string | null;
  /** The host that gave the answer (Remote-MTA, the MX), for the per-receiver rules. */
  remoteHost?: string | null;
  /** Diagnostic-Code type (`smtp`, `x-unix`, …). */
  diagnosticType?: string | null;
}

const STATUS_IN_TEXT = /(?<![\d.vV])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.]*\d)/;
const REPLY_IN_TEXT = /(?<![\d.])([245]\d\d)(?=[ -]|$)/m;
// "(in reply to RCPT TO command)" Postfix, "after RCPT TO:" Exim, ">>> RCPT To:" Sendmail,
// "[RCPT_TO]" Yahoo; a bare "RCPT TO"/"MAIL FROM" only in capitals or before a colon, so that
// prose ("please send mail to postmaster", Postfix's notice) is not read as a command.
const COMMAND_IN_TEXT = /in reply to (?:the )?(RCPT|MAIL|DATA|EHLO|HELO|end of data)|after (RCPT|MAIL|DATA|EHLO|HELO|end of data)|>>> (RCPT|MAIL|DATA|EHLO|HELO)|\[(RCPT|MAIL|DATA|END_OF_DATA)_?(?:TO|FROM)?\]|\b(rcpt) to:|\bmail from:/i;
const BARE_COMMAND = /\b(RCPT|MAIL) TO\b|\bMAIL FROM\b/;
// The continuation prefixes of a multi-line reply joined into one ("… unusual rate of 421-4.7.28
// unsolicited mail …", Gmail): after the first, they split the words the patterns look for.
const CONTINUATION = /(?<![\w.])[245]\d\d[- ]#?[245]\.\d{1,3}\.\d{1,3}(?:\s|$)/g;

/** The first enhanced status code in a text, e.g. "5.1.1" of "550 5.1.1 unknown"; null when none. */
export function statusInText(text: string): string | null {
  const m = STATUS_IN_TEXT.exec(text);
  return m ? `${m[1]}.${m[2]}.${m[3]}` : null;
}

/** The first reply code (e.g. 550 of "550-5.1.1 …") in a text; null when none. */
export function replyInText(text: string): number | null {
  const m = REPLY_IN_TEXT.exec(text);
  return m ? Number(m[1]) : null;
}

/** The SMTP command a diagnostic says it answered (RCPT, MAIL, DATA, EHLO, HELO); '' when it does not say. */
export function commandInText(text: string): string {
  const flat = text.replace(/\s+/g, ' ');
  const m = COMMAND_IN_TEXT.exec(flat) ?? BARE_COMMAND.exec(flat);
  if (!m) return '';
  const c = (m[1] ?? m[2] ?? m[3] ?? m[4] ?? m[5] ?? 'MAIL').toUpperCase();
  return c === 'END OF DATA' || c === 'END_OF_DATA' ? 'DATA' : c;
}

function textHolds(c: Compiled | undefined, text: string): boolean {
  if (!c?.re || !text) return false;
  if (c.not?.test(text)) return false;
  return c.re.test(text);
}

/** Phase 1 of reasons.toml: does this reason hold? */
function holds(r: Rules, c: Compiled, status: string, statusReason: string, reply: number, text: string, command: string): boolean {
  const s = c.spec;
  if (s.needs_status && !status) return false;
  if (s.not_status?.includes(statusReason)) return false;
  if (s.reply_codes?.includes(reply)) return true;
  if (statusReason === c.reason) {
    if (s.status_decides_with_text) return textHolds(c, text) || !!s.also_text?.some((o) => textHolds(r.byName.get(o), text));
    if (s.status_decides) return !s.unless_text?.some((o) => textHolds(r.byName.get(o), text));
  }
  if (s.not_commands?.includes(command)) return false;
  const gated = s.text_commands || s.text_status;
  if (gated && !s.text_commands?.includes(command) && !s.text_status?.includes(statusReason)) return false;
  return textHolds(c, text) || !!s.also_text?.some((o) => textHolds(r.byName.get(o), text));
}

function isTemporary(status: string, reply: number, text: string): boolean {
  if (status) return status.startsWith('4');
  if (reply) return reply >= 400 && reply < 500;
  return / temporar| persistent/i.test(text);
}

/**
 * The reason and hard/soft flag of one failure (or success). Never throws; `undefined` when
 * there is no evidence at all.
 */
export function classify(input: ClassifyInput, r: Rules = rules()): Classification {
  const raw = (input.text ?? '').replace(/\s+/g, ' ').trim();
  const lower = raw.toLowerCase();
  const status = input.status || statusInText(lower) || '';
  const reply = input.replyCode ?? replyInText(lower) ?? 0;
  const command = (input.command ? input.command.split(' ')[0] : commandInText(raw)).toUpperCase();
  let first = true;
  const text = lower.replace(CONTINUATION, (m) => (first ? ((first = false), m) : ''));
  const reason = decide(r, status, reply, text, command, input);
  const hard = r.hard.has(reason) && !(r.softWhenTemporary.has(reason) && isTemporary(status, reply, text));
  return { reason, hardBounce: hard };
}

function decide(r: Rules, status: string, reply: number, text: string, command: string, input: ClassifyInput): BounceReason {
  if (status.startsWith('2.')) return 'delivered';
  if (text) for (const t of r.tokens) if (t.re.test(text)) return t.reason;
  const host = (input.remoteHost ?? '').toLowerCase().replace(/\.$/, '');
  if (host && text) {
    for (const rh of r.rhosts) {
      if (!rh.hosts.some((h) => host.endsWith(h) || (h.startsWith('.') ? host === h.slice(1) : false))) continue;
      for (const x of rh.reasons) if (x.re.test(text)) return x.reason;
    }
  }
  const statusReason = r.status.get(status) ?? '';
  for (const c of r.first) if (holds(r, c, status, statusReason, reply, text, command)) return c.reason;

  const type = (input.diagnosticType ?? 'smtp').toLowerCase();
  if (statusReason && !r.retry.has(statusReason) && type === 'smtp') return statusReason as BounceReason;
  for (const c of r.second) if (textHolds(c, text)) return c.reason;
  if (statusReason) return statusReason as BounceReason;
  if (/^[45]\.6\./.test(status)) return 'contenterror';
  if (/^[45]\.7\./.test(status)) return 'securityerror';
  if (type.startsWith('x-unix')) return 'mailererror';
  if ((reply > 400 && reply < 408) || (reply > 500 && reply < 508)) return 'syntaxerror';
  const action = (input.action ?? '').toLowerCase();
  if (action.startsWith('delayed') || action.startsWith('expired')) return 'expired';
  if (command === 'EHLO' || command === 'HELO') return 'blocked';
  if (textHolds(r.byName.get('vacation'), text)) return 'vacation';
  return text ? 'onhold' : 'undefined';
}

/** True when the reason is one after which the address can never receive mail (as the rules say). */
export function isHardReason(reason: string, r: Rules = rules()): boolean {
  return r.hard.has(reason as BounceReason);
}
