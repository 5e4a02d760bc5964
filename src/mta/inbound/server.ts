/**
 * The MTA's inbound SMTP listener (docs/bounces.md → Listener): bounces and feedback reports
 * today, routed mail and mailboxes through further recipient steps. Built on smtp-server; the
 * size limit is announced in EHLO SIZE and enforced while the message streams in (552), so a
 * sender can never make us hold more than the limit.
 *
 * The SMTP submission listener (docs/submission.md) is this same server with its hooks set:
 * `auth` (STARTTLS before AUTH), `onMailFrom` and `extensions`.
 */
import { readFileSync } from 'node:fs';
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';
import { ConfigError } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import type { MtaPolicy } from '../policy.js';
import type { InboundTarget, RecipientStep } from './recipients.js';

/** A message accepted after DATA. */
export interface ReceivedMessage {
  raw: Buffer;
  targets: InboundTarget[];
  /** MAIL FROM ('' for the null sender of a bounce). */
  mailFrom: string;
  remoteIp: string;
  helo: string;
  /** What `auth.verify` returned for the session (submission), else undefined. */
  principal?: unknown;
  /** MAIL FROM's ESMTP parameters, upper-case names. */
  mailArgs: Record<string, string | boolean>;
}

/**
 * Handles one message for the targets of one kind. Resolves once its effects are durable
 * (then the sender gets 250); a rejection makes the sender retry (451).
 */
export type InboundHandler = (msg: ReceivedMessage) => Promise<void | string>;

/**
 * AUTH for a submission listener: offered only after STARTTLS (AUTH or MAIL before it gets
 * 530 5.7.0), PLAIN and LOGIN. `verify` returns the principal, null for a wrong password
 * (535), or throws an smtpError (e.g. 421 4.7.0 while the address is throttled).
 */
export interface SmtpAuthHook {
  verify(password: string, remoteIp: string): Promise<unknown | null>;
}

export interface InboundOptions {
  host: string;
  port: number;
  /** Our name in the greeting and EHLO. */
  name: string;
  maxMessageBytes: number;
  tls?: { certFile: string; keyFile: string };
  /** Implicit TLS (port 465) instead of STARTTLS. */
  secure?: boolean;
  /** The variable naming the port, for the bind error. */
  portVariable?: string;
  banner?: string;
  auth?: SmtpAuthHook;
  /** ESMTP keywords announced in EHLO (once TLS is up when `auth` is set). */
  extensions?: string[];
  /** Checked at MAIL FROM after smtp-server's own checks; throw an smtpError to refuse. */
  onMailFrom?: (address: string, args: Record<string, string | boolean>, session: SMTPServerSession) => Promise<void>;
  production: boolean;
  policy: MtaPolicy['inbound'];
  steps: RecipientStep[];
  handlers: Record<string, InboundHandler>;
  log: Logger;
}

export const smtpError = (code: number, message: string) => Object.assign(new Error(message), { responseCode: code });

type Send = (code: number, data?: string | string[], context?: unknown) => void;
/** The part of smtp-server's connection object the submission rules reach into. */
type Connection = { session: SMTPServerSession; secure: boolean; send: Send };

/**
 * smtp-server advertises AUTH before TLS, answers AUTH there with a non-standard 538, an
 * over-size SIZE with no enhanced code, and has no hook for EHLO keywords. Its one write
 * path (`send`) is wrapped per connection to say what RFC 3207/4954 and our spec say.
 */
function shapeReplies(c: Connection, extensions: string[], auth: boolean): void {
  const send = c.send.bind(c);
  c.send = (code, data, context) => {
    if (code === 250 && Array.isArray(data) && data.some((l) => /^SIZE\b/.test(String(l)))) {
      const lines = auth && !c.secure ? data.filter((l) => !/^AUTH\b/.test(String(l))) : data;
      return send(code, auth && !c.secure ? lines : [...lines, ...extensions], context);
    }
    if (code === 538) return send(530, '5.7.0 Must issue a STARTTLS command first', context);
    if (code === 552 && typeof data === 'string' && /^Error: message exceeds/.test(data)) return send(552, `5.3.4 ${data.replace(/^Error: m/, 'M')}`, context);
    if (code === 535 && typeof data === 'string' && !/^5\./.test(data)) return send(535, '5.7.8 Authentication credentials invalid', context);
    return send(code, data, context);
  };
}

export class InboundSmtpServer {
  private server: SMTPServer | null = null;
  private readonly perIp = new Map<string, number>();
  private boundPort: number | null = null;

  constructor(private readonly o: InboundOptions) {}

  /** The port listened on, null when not listening (bind failed outside production). */
  get port(): number | null {
    return this.boundPort;
  }

  async start(): Promise<void> {
    const o = this.o;
    const tls = o.tls ? { key: readFileSync(o.tls.keyFile), cert: readFileSync(o.tls.certFile) } : undefined;
    const server = new SMTPServer({
      name: o.name,
      banner: o.banner ?? 'Lettermill inbound',
      size: o.maxMessageBytes,
      ...(o.auth
        ? { authMethods: ['PLAIN', 'LOGIN'], authOptional: false, allowInsecureAuth: false, authRequiredMessage: '5.7.0 Authentication required: STARTTLS, then AUTH', onAuth: (a, session, cb) => void this.onAuth(a.password ?? '', session, cb) }
        : { authOptional: true, disabledCommands: ['AUTH'] }),
      hideSTARTTLS: !tls || !!o.secure,
      secure: !!o.secure,
      ...(tls ?? {}),
      maxClients: o.policy.maxClients,
      socketTimeout: o.policy.socketTimeoutMs,
      closeTimeout: o.policy.closeTimeoutMs,
      logger: false,
      onConnect: (session, cb) => this.onConnect(session, cb),
      onClose: (session) => this.onClose(session),
      onMailFrom: (address, session, cb) => {
        // A new transaction: recipients of one abandoned with RSET (or refused at DATA) must not carry over.
        (session as { targets?: InboundTarget[] }).targets = [];
        if (!o.onMailFrom) return cb();
        o.onMailFrom(address.address, (address.args || {}) as Record<string, string | boolean>, session).then(() => cb(), (err: Error) => cb(err));
      },
      onRcptTo: (address, session, cb) => void this.onRcptTo(address.address, session, cb),
      onData: (stream, session, cb) => this.onData(stream, session, cb),
    });
    server.on('error', (err) => o.log.warn({ err: err.message }, 'inbound SMTP error'));
    try {
      await new Promise<void>((resolve, reject) => {
        const onError = (err: Error) => reject(err);
        server.server.once('error', onError);
        server.listen(o.port, o.host, () => {
          server.server.off('error', onError);
          resolve();
        });
      });
    } catch (err) {
      const why = `SMTP could not listen on ${o.host}:${o.port} (${o.portVariable ?? 'INBOUND_SMTP_PORT'}): ${(err as Error).message}`;
      if (o.production) throw new ConfigError([why]);
      o.log.warn(`${why}; bounces and feedback reports are not received. Set INBOUND_SMTP_PORT to a free port.`);
      return;
    }
    this.server = server;
    const addr = server.server.address();
    this.boundPort = typeof addr === 'object' && addr ? addr.port : o.port;
    o.log.info({ host: o.host, port: this.boundPort, starttls: !!tls }, 'inbound SMTP listening');
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    this.boundPort = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private onConnect(session: SMTPServerSession, cb: (err?: Error) => void): void {
    if (this.o.auth || this.o.extensions?.length) {
      const conns = (this.server as unknown as { connections: Set<Connection> } | null)?.connections;
      const c = conns && [...conns].find((x) => x.session === session);
      if (c) shapeReplies(c, this.o.extensions ?? [], !!this.o.auth);
    }
    const ip = session.remoteAddress;
    const n = (this.perIp.get(ip) ?? 0) + 1;
    if (n > this.o.policy.maxConnectionsPerIp) return cb(smtpError(421, 'Too many connections from your address, try again later'));
    this.perIp.set(ip, n);
    (session as { counted?: boolean }).counted = true;
    cb();
  }

  private onClose(session: SMTPServerSession): void {
    if (!(session as { counted?: boolean }).counted) return;
    const ip = session.remoteAddress;
    const n = (this.perIp.get(ip) ?? 1) - 1;
    if (n <= 0) this.perIp.delete(ip);
    else this.perIp.set(ip, n);
  }

  private async onAuth(password: string, session: SMTPServerSession, cb: (err: Error | null | undefined, res?: { user?: unknown }) => void): Promise<void> {
    try {
      const principal = await this.o.auth!.verify(password, session.remoteAddress);
      if (principal == null) return cb(smtpError(535, '5.7.8 Authentication credentials invalid'));
      cb(null, { user: principal });
    } catch (err) {
      if ((err as { responseCode?: number }).responseCode) return cb(err as Error);
      this.o.log.error({ err }, 'SMTP AUTH check failed');
      cb(smtpError(454, '4.7.0 Temporary authentication failure'));
    }
  }

  private async onRcptTo(address: string, session: SMTPServerSession, cb: (err?: Error) => void): Promise<void> {
    try {
      const targets = (session as { targets?: InboundTarget[] }).targets ?? [];
      if (targets.length >= this.o.policy.maxRecipients) return cb(smtpError(452, '4.5.3 Too many recipients'));
      const args = session.envelope.mailFrom ? (session.envelope.mailFrom.args as Record<string, string> | false) : false;
      const size = Number(args ? args.SIZE : undefined);
      for (const step of this.o.steps) {
        const target = await step(address, Number.isFinite(size) ? { size } : {});
        if (target && this.o.handlers[target.kind]) {
          (session as { targets?: InboundTarget[] }).targets = [...targets, target];
          return cb();
        }
      }
      cb(smtpError(550, '5.1.1 No such recipient here'));
    } catch (err) {
      if ((err as { responseCode?: number }).responseCode) return cb(err as Error);
      this.o.log.error({ err }, 'inbound recipient check failed');
      cb(smtpError(451, '4.3.0 Temporary failure, try again later'));
    }
  }

  private onData(stream: SMTPServerDataStream, session: SMTPServerSession, cb: (err?: Error | null, message?: string) => void): void {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // Past the limit nothing more is kept: the rest is read and dropped, then refused.
      if (size <= this.o.maxMessageBytes) chunks.push(chunk);
    });
    stream.on('error', (err) => cb(err));
    stream.on('end', () => {
      if (stream.sizeExceeded || size > this.o.maxMessageBytes) {
        return cb(smtpError(552, `5.3.4 Message exceeds the size limit of ${this.o.maxMessageBytes} bytes`));
      }
      const targets = (session as { targets?: InboundTarget[] }).targets ?? [];
      (session as { targets?: InboundTarget[] }).targets = [];
      const raw = Buffer.concat(chunks);
      const mailFrom = session.envelope.mailFrom;
      const base = {
        raw,
        mailFrom: mailFrom ? mailFrom.address : '',
        mailArgs: ((mailFrom && mailFrom.args) || {}) as Record<string, string | boolean>,
        principal: session.user,
        remoteIp: session.remoteAddress,
        helo: session.hostNameAppearsAs ?? '',
      };
      const byKind = new Map<string, InboundTarget[]>();
      for (const t of targets) byKind.set(t.kind, [...(byKind.get(t.kind) ?? []), t]);
      Promise.all([...byKind].map(([kind, ts]) => this.o.handlers[kind]!({ ...base, targets: ts }))).then(
        (said) => cb(null, said.filter((x) => typeof x === 'string').join(' ') || 'Message accepted'),
        (err: Error) => {
          if ((err as { responseCode?: number }).responseCode) return cb(err);
          this.o.log.error({ err }, 'inbound message could not be processed');
          cb(smtpError(451, '4.3.0 Temporary failure, try again later'));
        },
      );
    });
  }
}
