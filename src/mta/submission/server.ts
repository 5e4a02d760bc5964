/**
 * The SMTP submission listener (docs/submission.md): the inbound listener's server with its
 * submission hooks — STARTTLS then AUTH, the sender checks at MAIL, the idempotency
 * parameters announced in EHLO, every envelope recipient accepted, and DATA answered 250
 * only once the jobs and the intake receipt are committed.
 */
import type { SMTPServerSession } from 'smtp-server';
import { domainOf, normalizeAddress, parseMailbox } from '../../shared/mail/address.js';
import type { Logger } from '../../shared/log.js';
import { InboundSmtpServer, smtpError, type ReceivedMessage } from '../inbound/server.js';
import type { MtaPolicy } from '../policy.js';
import type { SubmissionAuth } from './auth.js';
import { KeyReuseError, type SubmissionIntake, type SubmissionPrincipal } from './intake.js';
import { DEDUP_PARAM, ID_PARAM, isIdempotencyKey, readHeaders, stripBcc } from './message.js';

export interface SubmissionOptions {
  host: string;
  port: number;
  /** Implicit TLS (465) instead of STARTTLS. */
  secure?: boolean;
  name: string;
  tls: { certFile: string; keyFile: string };
  production: boolean;
  policy: MtaPolicy;
  auth: SubmissionAuth;
  intake: SubmissionIntake;
  /** Back-pressure as POST /send applies it: true when the queue is full (452) or every IP is blocked (421). */
  busy: () => Promise<'queue_full' | 'emergency' | null>;
  /** Whether a domain has an active DKIM key. */
  hasDkimKey: (domain: string) => Promise<boolean>;
  log: Logger;
}

const KIND = 'submission';

/** An app password limited to senders: each entry an address or a domain. */
function senderAllowed(p: SubmissionPrincipal, address: string): boolean {
  if (p.kind !== 'app' || p.senders.length === 0) return true;
  const a = address.toLowerCase();
  const d = domainOf(a);
  return p.senders.some((s) => (s.includes('@') ? s.toLowerCase() === a : s.toLowerCase() === d));
}

export function createSubmissionServer(o: SubmissionOptions): InboundSmtpServer {
  const checkSender = async (p: SubmissionPrincipal, address: string, what: string) => {
    if (!senderAllowed(p, address)) throw smtpError(550, `5.7.1 This credential may not send as ${address}`);
    const domain = domainOf(address);
    if (!(await o.hasDkimKey(domain))) throw smtpError(550, `5.7.1 ${what} domain ${domain} has no DKIM key; add one with POST /dkim before sending`);
  };

  const onMailFrom = async (address: string, args: Record<string, string | boolean>, session: SMTPServerSession) => {
    const id = args[ID_PARAM];
    if (id !== undefined && (typeof id !== 'string' || !isIdempotencyKey(id))) throw smtpError(501, `5.5.4 ${ID_PARAM} must be 1 to 200 characters from A-Z a-z 0-9 . _ ~ : + -`);
    const dedup = args[DEDUP_PARAM];
    if (dedup !== undefined && (typeof dedup !== 'string' || dedup.toUpperCase() !== 'OFF')) throw smtpError(501, `5.5.4 ${DEDUP_PARAM} takes only the value OFF`);
    const sender = normalizeAddress(address);
    if (!sender) throw smtpError(550, '5.7.1 A sender address is required for submission');
    await checkSender(session.user as SubmissionPrincipal, sender, 'Sender');
  };

  const handle = async (msg: ReceivedMessage): Promise<string> => {
    const principal = msg.principal as SubmissionPrincipal;
    const headers = readHeaders(msg.raw);
    const param = msg.mailArgs[ID_PARAM];
    const headerKeys = [...new Set(headers.idempotencyKey)];
    if (headerKeys.length > 1 || headerKeys.some((k) => !isIdempotencyKey(k))) {
      throw smtpError(501, '5.5.4 X-Lettermill-Idempotency-Key must be one key of 1 to 200 characters from A-Z a-z 0-9 . _ ~ : + -');
    }
    const key = typeof param === 'string' ? param : headerKeys[0];
    const dedupOff = msg.mailArgs[DEDUP_PARAM] !== undefined || headers.dedup.some((v) => v.toLowerCase() === 'off');
    if (headers.from.length !== 1) throw smtpError(550, '5.6.0 The message must have exactly one From field');
    const from = parseMailbox(headers.from[0]!);
    if (!from) throw smtpError(550, '5.6.0 The From field must be one address');
    await checkSender(principal, from.address, 'From');
    const busy = await o.busy();
    if (busy === 'queue_full') throw smtpError(452, '4.3.1 The delivery queue is full, try again later');
    if (busy === 'emergency') throw smtpError(421, '4.3.2 Every sending IP is blocked, try again later');
    try {
      const ids = await o.intake.accept({
        principal,
        sender: normalizeAddress(msg.mailFrom)!,
        data: msg.raw,
        raw: stripBcc(msg.raw, headers),
        from: from.address,
        dkimDomain: domainOf(from.address),
        recipients: msg.targets.map((t) => t.address),
        key,
        dedupOff,
      });
      const list = ids.join(' ');
      // A reply line stays within RFC 5321's 512 octets.
      return `2.0.0 Queued as ${list.length <= 400 ? list : `${ids.length} jobs, ${ids[0]} … ${ids.at(-1)}`}`;
    } catch (err) {
      if (err instanceof KeyReuseError) throw smtpError(554, '5.5.4 Idempotency key reused with a different sender or message');
      throw err;
    }
  };

  return new InboundSmtpServer({
    host: o.host,
    port: o.port,
    name: o.name,
    banner: 'Lettermill submission',
    maxMessageBytes: o.policy.submission.maxMessageBytes,
    tls: o.tls,
    secure: o.secure,
    portVariable: o.secure ? 'SUBMISSION_TLS_PORT' : 'SUBMISSION_PORT',
    production: o.production,
    policy: o.policy.inbound,
    auth: o.auth,
    extensions: [ID_PARAM, DEDUP_PARAM],
    onMailFrom,
    steps: [
      (address) => {
        const a = normalizeAddress(address);
        if (!a) throw smtpError(501, '5.1.3 Recipient address is not valid');
        return { kind: KIND, address: a };
      },
    ],
    handlers: { [KIND]: handle },
    log: o.log,
  });
}
