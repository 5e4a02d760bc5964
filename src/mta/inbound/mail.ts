/**
 * Routed and mailbox mail after DATA (docs/inbound.md): loops refused, the message
 * authenticated once (SPF, DKIM, DMARC through mailauth) and stamped with our
 * Authentication-Results, DMARC failures under p=reject refused (INBOUND_DMARC_REJECT), then
 * per kind:
 *  - `inbox`: an `inbound.received` event with the parsed message, through the outbox;
 *  - `mailbox`: a delivery to the backend's `/webhooks/mta-mailbox`, through the outbox;
 *  - `forward`: a re-originated copy per target, queued as a raw-MIME job (pool transactional).
 * The 250 follows the durable write of each; ids are derived from the message, so a sender
 * that sends again after a lost 250 produces the same event, delivery and jobs.
 */
import { createHash } from 'node:crypto';
import { simpleParser, type AddressObject, type ParsedMail } from 'mailparser';
import { toIso, type Clock } from '../../shared/clock.js';
import { MTA_EVENT, type MtaEventData, type MtaRawJob } from '../../shared/contracts/mta.js';
import type { Logger } from '../../shared/log.js';
import { formatMailbox, normalizeAddress } from '../../shared/mail/address.js';
import type { OutboxRelay } from '../outbox/relay.js';
import { inboundEventId } from '../outbox/store.js';
import type { MtaMetrics } from '../metrics.js';
import type { MtaPolicy } from '../policy.js';
import type { InboundRouteStore, MailboxCacheStore } from '../stores/inbound.js';
import type { InboundAuth } from './auth.js';
import { fieldValue, headerFields, LOOP_HEADER, reoriginate } from './forward.js';
import type { InboundTarget } from './recipients.js';
import { smtpError, type ReceivedMessage } from './server.js';

export interface InboundMailOptions {
  routes: InboundRouteStore;
  mailboxes: MailboxCacheStore;
  relay: OutboxRelay;
  authenticate: (msg: ReceivedMessage) => Promise<InboundAuth>;
  /** Queues forwarded copies (one transaction; idempotent by message id). */
  enqueue: (jobs: MtaRawJob[]) => Promise<void>;
  /** INBOUND_DMARC_REJECT. */
  dmarcReject: boolean;
  /** Organization of forward routes that name none (ORGANIZATION_ID). */
  defaultOrganization: string;
  policy: MtaPolicy['inbound'];
  metrics: MtaMetrics | null;
  clock: Clock;
  log: Logger;
}

interface Checked {
  auth: InboundAuth;
  /** The message as stored and delivered: our trace headers, then the octets received. */
  stamped: Buffer;
  digest: string;
}

const clip = (s: string, max: number) => (s.length > max ? s.slice(0, max) : s);

export class InboundMail {
  /** One check per message, shared by the handlers of its kinds (they run side by side). */
  private readonly checks = new WeakMap<Buffer, Promise<Checked>>();

  constructor(private readonly o: InboundMailOptions) {}

  readonly inbox = (msg: ReceivedMessage): Promise<void> => this.counted('inbox', msg, () => this.toInbox(msg));
  readonly mailbox = (msg: ReceivedMessage): Promise<void> => this.counted('mailbox', msg, () => this.toMailbox(msg));
  readonly forward = (msg: ReceivedMessage): Promise<void> => this.counted('forward', msg, () => this.toForward(msg));

  /** Counts each message's outcome per kind (mta_inbound_routed_total). */
  private async counted(kind: string, msg: ReceivedMessage, run: () => Promise<void>): Promise<void> {
    try {
      await run();
      this.o.metrics?.inboundRouted.inc({ kind, outcome: 'accepted' }, msg.targets.length);
    } catch (err) {
      const code = (err as { responseCode?: number; message: string }).responseCode;
      const outcome = code === 554 ? 'loop' : code === 550 ? 'dmarc_reject' : 'failed';
      this.o.metrics?.inboundRouted.inc({ kind, outcome }, msg.targets.length);
      throw err;
    }
  }

  private async toInbox(msg: ReceivedMessage): Promise<void> {
    const c = await this.check(msg);
    const parsed = await parse(c.stamped);
    const byRoute = new Map<string, InboundTarget[]>();
    for (const t of msg.targets) byRoute.set(t.token!, [...(byRoute.get(t.token!) ?? []), t]);
    for (const [route, targets] of byRoute) {
      const at = route.lastIndexOf('@');
      const data = this.received(msg, c, parsed, targets, { domain: route.slice(at + 1), address: route.slice(0, at) });
      await this.o.relay.record(MTA_EVENT.inboundReceived, data, inboundEventId('i', c.digest, route));
    }
  }

  private async toMailbox(msg: ReceivedMessage): Promise<void> {
    const c = await this.check(msg);
    const raw = c.stamped.toString('base64');
    for (const t of msg.targets) {
      const entry = this.o.mailboxes.get(t.address);
      // Removed between RCPT and DATA: the sender tries again and gets 550 then.
      if (!entry) throw smtpError(451, '4.3.0 Mailbox changed, try again later');
      const { prepend: _, ...authentication } = c.auth;
      await this.o.relay.mailbox({
        id: inboundEventId('m', c.digest, t.address),
        mailboxId: entry.mailboxId,
        organizationId: entry.organizationId,
        address: t.address,
        envelopeFrom: clip(msg.mailFrom, 998),
        receivedAt: toIso(this.o.clock.now()),
        authentication,
        rawSize: c.stamped.length,
        raw,
      });
    }
  }

  private async toForward(msg: ReceivedMessage): Promise<void> {
    const c = await this.check(msg);
    const jobs: MtaRawJob[] = [];
    for (const t of msg.targets) {
      const at = t.token!.lastIndexOf('@');
      const route = this.o.routes.exact(t.token!.slice(0, at), t.token!.slice(at + 1));
      if (!route || route.action !== 'forward') throw smtpError(451, '4.3.0 Route changed, try again later');
      const copy = reoriginate(msg.raw, { fromAddress: t.address, authResults: c.auth.header, domain: route.domain });
      const raw = copy.raw.toString('base64');
      for (const to of route.targets) {
        // Never to an address received here (the routes refuse it; a race between instances cannot loop either).
        if (this.o.routes.resolve(to) || this.o.mailboxes.get(to)) {
          this.o.log.warn({ route: `${route.address}@${route.domain}`, target: to }, 'forward target is received here: not forwarded');
          continue;
        }
        jobs.push({
          messageId: `fwd-${createHash('sha256').update(`${c.digest}\0${t.address}\0${to}`).digest('base64url').slice(0, 32)}`,
          to,
          from: t.address,
          raw,
          ipPool: 'transactional',
          organizationId: route.organizationId ?? this.o.defaultOrganization,
          dkimDomain: route.domain,
          campaignId: null,
        });
      }
    }
    if (jobs.length > 0) await this.o.enqueue(jobs);
  }

  /** Loops, authentication and the DMARC verdict: once per message, whatever its kinds. */
  private check(msg: ReceivedMessage): Promise<Checked> {
    let p = this.checks.get(msg.raw);
    if (!p) {
      p = this.runCheck(msg);
      this.checks.set(msg.raw, p);
    }
    return p;
  }

  private async runCheck(msg: ReceivedMessage): Promise<Checked> {
    const { fields } = headerFields(msg.raw);
    if (fieldValue(fields, LOOP_HEADER.toLowerCase()) !== null) throw smtpError(554, '5.4.6 Routing loop detected: this message was forwarded by us');
    if (fields.filter((f) => f.name === 'received').length > this.o.policy.maxReceivedHeaders) throw smtpError(554, '5.4.6 Routing loop detected: too many Received header fields');
    const auth = await this.o.authenticate(msg);
    if (this.o.dmarcReject && auth.dmarc === 'fail' && auth.dmarcPolicy === 'reject') {
      throw smtpError(550, '5.7.1 Message refused: it fails DMARC and its From domain publishes p=reject');
    }
    return { auth, stamped: Buffer.concat([Buffer.from(auth.prepend, 'latin1'), msg.raw]), digest: createHash('sha256').update(msg.raw).digest('base64url') };
  }

  private received(msg: ReceivedMessage, c: Checked, p: Parsed, targets: InboundTarget[], route: { domain: string; address: string }): MtaEventData[typeof MTA_EVENT.inboundReceived] {
    const { prepend: _, ...authentication } = c.auth;
    return {
      messageId: p.mail?.messageId ? clip(p.mail.messageId, 998) : null,
      from: clip(addressText(p.mail?.from) || msg.mailFrom || '<>', 1000),
      to: targets.map((t) => t.address),
      subject: clip(p.mail?.subject ?? '', 998),
      text: p.mail?.text ?? null,
      html: p.mail && typeof p.mail.html === 'string' ? p.mail.html : null,
      inReplyTo: p.mail?.inReplyTo ? clip(p.mail.inReplyTo, 998) : null,
      references: (Array.isArray(p.mail?.references) ? p.mail.references : p.mail?.references ? [p.mail.references] : []).slice(0, 100).map((r) => clip(r, 998)),
      receivedAt: toIso(this.o.clock.now()),
      route,
      attachments: (p.mail?.attachments ?? []).slice(0, 1000).map((a) => ({
        filename: a.filename ? clip(a.filename, 255) : null,
        contentType: clip(a.contentType || 'application/octet-stream', 255),
        size: a.size ?? a.content?.length ?? 0,
        contentId: a.cid ? clip(a.cid, 998) : null,
      })),
      authentication,
      rawSize: c.stamped.length,
      raw: c.stamped.toString('base64'),
      ...(p.warning ? { parseWarning: p.warning } : {}),
    };
  }
}

interface Parsed {
  mail: ParsedMail | null;
  warning?: string;
}

/** mailparser's reading; a message it cannot read is still delivered raw, with the reason. */
async function parse(raw: Buffer): Promise<Parsed> {
  try {
    return { mail: await simpleParser(raw, { skipImageLinks: true, skipTextToHtml: true }) };
  } catch (err) {
    return { mail: null, warning: `the message could not be parsed: ${(err as Error).message}`.slice(0, 500) };
  }
}

/** The From as the one address grammar writes it (`Name <a@b>`); mailparser's text when it is not one of ours. */
function addressText(a: AddressObject | AddressObject[] | undefined): string {
  if (!a) return '';
  const list = (Array.isArray(a) ? a : [a]).flatMap((x) => x.value);
  const ours = list.map((m) => {
    const address = m.address ? normalizeAddress(m.address) : null;
    return address ? formatMailbox({ name: m.name || null, address }) : null;
  });
  return ours.every((x) => x !== null) && ours.length > 0 ? ours.join(', ') : (Array.isArray(a) ? a : [a]).map((x) => x.text).join(', ');
}
