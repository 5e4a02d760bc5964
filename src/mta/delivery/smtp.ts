/**
 * One SMTP client session to a remote MX (RFC 5321, PIPELINING RFC 2920, STARTTLS RFC 3207,
 * 8BITMIME, SIZE). Envelope addresses are ASCII: the address grammar refuses non-ASCII local
 * parts (src/shared/mail/address.ts), so SMTPUTF8 is never needed.
 *
 * Hand-written over net/tls rather than nodemailer's SMTPConnection, which we used first: on
 * the delivery benchmark nodemailer took roughly a third of the event loop per message, mostly its
 * byte-by-byte dot-stuffing stream, a separate RSET round trip between messages and several
 * writes per message. Here a reused connection sends RSET, MAIL, RCPT and DATA as one
 * pipelined write and the message as one more (dot-stuffed with native string operations),
 * so a message costs two round trips and two writes. The session only does what an MTA's
 * outbound client needs: no AUTH, one recipient per transaction.
 */
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { checkServerIdentity, connect as tlsConnect, type TLSSocket } from 'node:tls';
import { DELIVERY } from './settings.js';

export interface SessionTarget {
  mxHost: string;
  address: string;
  port: number;
  /** Source address to bind; '' lets the OS choose. */
  bindIp: string;
  ehloName: string;
}

export interface TlsPolicy {
  /** CAs to judge certificates against instead of the system's (tests): recorded as `tlsAuthorized`. */
  ca?: string | Buffer | (string | Buffer)[];
  /**
   * MTA-STS `enforce` (RFC 8461 §5): STARTTLS must be offered and the certificate must chain
   * to a trusted CA and name the MX host; otherwise the session fails (code ETLS, with
   * `tlsResult`) and there is no plain-text retry.
   */
  require?: boolean;
}

/** RFC 8460 §4.3.2.1 result types a session can produce. */
export type TlsResultType = 'starttls-not-supported' | 'certificate-host-mismatch' | 'certificate-expired' | 'certificate-not-trusted' | 'validation-failure';

const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
]);

/** What a certificate check found, as a TLS-RPT result type (null: valid for `host`). */
export function certificateResult(secure: TLSSocket, host: string): { type: TlsResultType; detail: string } | null {
  if (!secure.authorized) {
    const err = secure.authorizationError as (Error & { code?: string }) | string | null;
    const code = typeof err === 'string' ? err : (err?.code ?? String(err?.message ?? 'unknown'));
    if (code === 'CERT_HAS_EXPIRED') return { type: 'certificate-expired', detail: code };
    // With a servername, Node checks the name itself and reports a mismatch here.
    if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return { type: 'certificate-host-mismatch', detail: code };
    if (UNTRUSTED.has(code)) return { type: 'certificate-not-trusted', detail: code };
    return { type: 'validation-failure', detail: code };
  }
  const mismatch = checkServerIdentity(host, secure.getPeerCertificate());
  return mismatch ? { type: 'certificate-host-mismatch', detail: mismatch.message } : null;
}

/** An error from the SMTP layer with what the classifier needs. */
export interface SmtpFailure {
  /** The server's reply, when the failure was a reply. */
  response?: string;
  responseCode?: number;
  /** ECONNECTION, ETIMEDOUT, ESOCKET, ETLS, EPROTOCOL, EENVELOPE, EMESSAGE. */
  code: string;
  /** SMTP stage: CONN, EHLO, STARTTLS, MAIL FROM, RCPT TO, DATA. */
  command?: string;
  message: string;
}

export class SmtpError extends Error implements SmtpFailure {
  tlsHandshake = false;
  /** Required TLS could not be had: why, as a TLS-RPT result type. */
  tlsResult?: { type: TlsResultType; detail: string };
  constructor(
    readonly code: string,
    message: string,
    readonly command?: string,
    readonly response?: string,
  ) {
    super(response ? `${message}: ${response}` : message);
    this.name = 'SmtpError';
  }
  get responseCode(): number | undefined {
    const m = this.response ? /^(\d{3})/.exec(this.response) : null;
    return m ? Number(m[1]) : undefined;
  }
}

export function toFailure(err: unknown): SmtpFailure {
  const e = err as Partial<SmtpFailure> & { message?: string };
  return {
    response: typeof e?.response === 'string' ? e.response : undefined,
    responseCode: typeof e?.responseCode === 'number' ? e.responseCode : undefined,
    code: e?.code ?? 'EUNKNOWN',
    command: e?.command,
    message: e?.message ?? String(err),
  };
}

function required(type: TlsResultType, detail: string): SmtpError {
  const e = new SmtpError('ETLS', `MTA-STS requires TLS: ${type} (${detail})`, 'STARTTLS');
  e.tlsResult = { type, detail };
  return e;
}

const MAX_REPLY = 64 * 1024;
const QUIT_WAIT_MS = 2_000;

type Waiter = { resolve: (reply: string) => void; reject: (err: Error) => void };

/** True when every CR is followed by LF and every LF preceded by CR (indexOf scans, no regex). */
function onlyCrlf(s: string): boolean {
  for (let i = s.indexOf('\n'); i >= 0; i = s.indexOf('\n', i + 1)) if (i === 0 || s.charCodeAt(i - 1) !== 13) return false;
  for (let i = s.indexOf('\r'); i >= 0; i = s.indexOf('\r', i + 1)) if (s.charCodeAt(i + 1) !== 10) return false;
  return true;
}

/**
 * Dot-stuffs a message (RFC 5321 §4.5.2) and appends the terminating `.` line. A string is
 * the wire form read as latin1 (one char per octet), as the deliverer builds it.
 */
export function dataBlock(raw: Buffer | string | readonly string[]): Buffer {
  if (Array.isArray(raw)) return pieces(raw as readonly string[]);
  let s = typeof raw === 'string' ? raw : (raw as Buffer).toString('latin1');
  // Every line break must be CRLF: a lone CR or LF is a smuggling vector (CVE-2023-51764).
  if (!onlyCrlf(s)) s = s.replace(/\r\n|\r|\n/g, '\r\n');
  if (s.charCodeAt(0) === 0x2e) s = `.${s}`;
  if (s.includes('\r\n.')) s = s.replace(/\r\n\./g, '\r\n..');
  if (!s.endsWith('\r\n') && s.length > 0) s += '\r\n';
  return Buffer.from(`${s}.\r\n`, 'latin1');
}

/**
 * dataBlock of the message made of `parts` (latin1 strings: the DKIM-Signature fields, then the
 * built message). When no part needs a change — CRLF line breaks only, no line starting with a
 * dot, every part but the last ending a line — each part is written once into the block (no
 * joined copy of a 100 KB message); otherwise the joined text takes the general path.
 */
function pieces(parts: readonly string[]): Buffer {
  let total = 0;
  let clean = true;
  for (let i = 0; i < parts.length && clean; i++) {
    const p = parts[i]!;
    total += p.length;
    const last = i === parts.length - 1;
    clean = p.charCodeAt(0) !== 0x2e && onlyCrlf(p) && !p.includes('\r\n.') && (p.length === 0 || p.endsWith('\r\n') || last);
  }
  if (!clean) return dataBlock(parts.join(''));
  const last = parts.at(-1) ?? '';
  const crlf = last.length > 0 && !last.endsWith('\r\n') ? 2 : 0;
  const out = Buffer.allocUnsafe(total + crlf + 3);
  let at = 0;
  for (const p of parts) at += out.write(p, at, 'latin1');
  if (crlf) at += out.write('\r\n', at, 'latin1');
  out.write('.\r\n', at, 'latin1');
  return out;
}

export class SmtpSession {
  readonly createdAt: number;
  lastUsed: number;
  messages = 0;
  closed = false;
  /** STARTTLS failed on the first connection and this one is plain text (recorded). */
  tlsFallback = false;
  tls = false;
  /** Whether the certificate chain verified against the system or configured CAs. */
  tlsAuthorized = false;
  /** The certificate's problem for this MX host (chain or name), null when valid or no TLS. */
  tlsProblem: { type: TlsResultType; detail: string } | null = null;
  /** EHLO keywords, upper case (`PIPELINING`, `8BITMIME`, `SIZE`, ...). */
  extensions: string[] = [];
  private maxSize = 0;
  private socket: Socket | TLSSocket;
  private buffer = '';
  private lines: string[] = [];
  private waiters: Waiter[] = [];
  private needRset = false;
  private failure: SmtpError | undefined;
  private readonly onData = (chunk: Buffer) => this.receive(chunk);
  private readonly closedPromise: Promise<void>;
  private markClosed!: () => void;

  private constructor(
    socket: Socket,
    readonly target: SessionTarget,
    now: number,
  ) {
    this.createdAt = now;
    this.lastUsed = now;
    this.socket = socket;
    this.closedPromise = new Promise((resolve) => (this.markClosed = resolve));
    this.attach(socket);
  }

  /**
   * Opens a session: connect (bound to the sending IP), greeting, EHLO, STARTTLS when offered.
   * A failed TLS handshake retries the same address once in plain text (opportunistic TLS
   * must not make mail undeliverable, RFC 7435); the session records that it fell back.
   */
  static async open(target: SessionTarget, tls: TlsPolicy, now: () => number): Promise<SmtpSession> {
    try {
      return await SmtpSession.connect(target, tls, false, now);
    } catch (err) {
      if (!(err instanceof SmtpError && err.tlsHandshake) || tls.require) throw err;
      const s = await SmtpSession.connect(target, tls, true, now);
      s.tlsFallback = true;
      return s;
    }
  }

  private static async connect(target: SessionTarget, tls: TlsPolicy, plain: boolean, now: () => number): Promise<SmtpSession> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = netConnect({ host: target.address, port: target.port, ...(target.bindIp ? { localAddress: target.bindIp } : {}) });
      const timer = setTimeout(() => {
        s.destroy();
        reject(new SmtpError('ETIMEDOUT', `connection to ${target.address}:${target.port} timed out`, 'CONN'));
      }, DELIVERY.connectTimeoutMs);
      s.once('connect', () => {
        clearTimeout(timer);
        s.removeAllListeners('error');
        resolve(s);
      });
      s.once('error', (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(new SmtpError('ECONNECTION', `${err.code ?? 'error'} connecting to ${target.address}:${target.port}: ${err.message}`, 'CONN'));
      });
    });
    socket.setNoDelay(true);
    const session = new SmtpSession(socket, target, now());
    try {
      await session.handshake(tls, plain);
    } catch (err) {
      session.destroy();
      throw err;
    }
    return session;
  }

  private async handshake(tls: TlsPolicy, plain: boolean): Promise<void> {
    const greeting = await this.reply(DELIVERY.greetingTimeoutMs, 'CONN');
    if (!greeting.startsWith('220')) throw new SmtpError('EPROTOCOL', 'unexpected greeting', 'CONN', greeting);
    await this.ehlo();
    if (tls.require && !this.extensions.includes('STARTTLS')) throw required('starttls-not-supported', 'the server does not offer STARTTLS');
    if (!plain && this.extensions.includes('STARTTLS')) {
      this.write('STARTTLS\r\n');
      const r = await this.reply(DELIVERY.greetingTimeoutMs, 'STARTTLS');
      if (!r.startsWith('220')) {
        if (tls.require) throw required('starttls-not-supported', `STARTTLS refused: ${r}`);
        // Refused with a reply: carry on in plain text on this connection.
        return;
      }
      await this.upgrade(tls);
      if (tls.require && this.tlsProblem) throw required(this.tlsProblem.type, this.tlsProblem.detail);
      await this.ehlo();
    }
  }

  private async ehlo(): Promise<void> {
    this.write(`EHLO ${this.target.ehloName}\r\n`);
    let r = await this.reply(DELIVERY.greetingTimeoutMs, 'EHLO');
    if (r.startsWith('421')) throw new SmtpError('ECONNECTION', 'server closing', 'EHLO', r);
    if (!r.startsWith('2')) {
      this.write(`HELO ${this.target.ehloName}\r\n`);
      r = await this.reply(DELIVERY.greetingTimeoutMs, 'HELO');
      if (!r.startsWith('2')) throw new SmtpError('EPROTOCOL', 'HELO refused', 'HELO', r);
      this.extensions = [];
      return;
    }
    const lines = r.split('\n').slice(1);
    this.extensions = lines.map((l) => l.slice(4).trim().split(/\s+/)[0].toUpperCase());
    const size = lines.map((l) => /^\d{3}[ -]SIZE\s+(\d+)/i.exec(l)).find(Boolean);
    this.maxSize = size ? Number(size[1]) : 0;
  }

  private upgrade(tls: TlsPolicy): Promise<void> {
    const plainSocket = this.socket;
    plainSocket.removeListener('data', this.onData);
    // The TLS socket carries the traffic (and the inactivity timeout) from here on.
    plainSocket.setTimeout(0);
    // RFC 3207 §6: nothing the server sent before the handshake may be used afterwards.
    this.buffer = '';
    this.lines = [];
    return new Promise((resolve, reject) => {
      const fail = (message: string) => {
        clearTimeout(timer);
        const e = new SmtpError('ETLS', message, 'STARTTLS');
        e.tlsHandshake = true;
        if (tls.require) e.tlsResult = { type: 'validation-failure', detail: message };
        reject(e);
      };
      // Opportunistic TLS authenticates nothing (RFC 7435): any certificate is accepted and
      // whether it verified is recorded; required TLS judges the same record in handshake().
      // SNI names the MX host.
      const secure = tlsConnect({
        socket: plainSocket,
        servername: isIP(this.target.mxHost) ? undefined : this.target.mxHost,
        rejectUnauthorized: false,
        ...(tls.ca ? { ca: tls.ca } : {}),
      });
      const timer = setTimeout(() => {
        secure.destroy();
        fail('TLS handshake timed out');
      }, DELIVERY.greetingTimeoutMs);
      secure.once('error', (err) => fail(`TLS handshake failed: ${err.message}`));
      secure.once('secureConnect', () => {
        clearTimeout(timer);
        secure.removeAllListeners('error');
        this.tls = true;
        this.tlsAuthorized = secure.authorized;
        this.tlsProblem = certificateResult(secure, this.target.mxHost);
        this.socket = secure;
        this.attach(secure);
        resolve();
      });
    });
  }

  private attach(s: Socket): void {
    s.on('data', this.onData);
    s.on('error', (err: NodeJS.ErrnoException) => this.fail(new SmtpError('ESOCKET', `${err.code ?? 'socket error'}: ${err.message}`, 'CONN')));
    s.on('close', () => {
      this.fail(new SmtpError('ECONNECTION', 'connection closed by the server', 'CONN'));
      this.markClosed();
    });
    s.setTimeout(DELIVERY.socketTimeoutMs, () => {
      this.fail(new SmtpError('ETIMEDOUT', `no data for ${DELIVERY.socketTimeoutMs} ms`, 'CONN'));
      s.destroy();
    });
  }

  /** The connection is unusable from now on: every pending and later read fails. */
  private fail(err: SmtpError): void {
    this.closed = true;
    this.failure ??= err;
    for (const w of this.waiters.splice(0)) w.reject(err);
  }

  private receive(chunk: Buffer): void {
    this.buffer += chunk.toString('latin1');
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl).replace(/\r$/, '');
      this.buffer = this.buffer.slice(nl + 1);
      this.lines.push(line);
      // The last line of a reply has a space (or nothing) after its code.
      if (!/^\d{3}-/.test(line)) {
        const reply = this.lines.join('\n');
        this.lines = [];
        const w = this.waiters.shift();
        if (w) w.resolve(reply);
        else {
          // The server spoke out of turn (typically 421 before closing an idle connection).
          this.fail(new SmtpError('ECONNECTION', 'unsolicited reply', 'CONN', reply));
          this.socket.destroy();
          return;
        }
      }
    }
    if (this.buffer.length + this.lines.reduce((n, l) => n + l.length, 0) > MAX_REPLY) {
      this.fail(new SmtpError('EPROTOCOL', 'server reply too large', 'CONN'));
      this.socket.destroy();
    }
  }

  /** The next reply; `timeoutMs` bounds the greeting/handshake stages (others use the socket timeout). */
  private reply(timeoutMs: number | undefined, command: string): Promise<string> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs) {
        timer = setTimeout(() => {
          const e = new SmtpError('ETIMEDOUT', `no ${command} reply within ${timeoutMs} ms`, command);
          this.fail(e);
          this.socket.destroy();
        }, timeoutMs);
      }
      this.waiters.push({
        resolve: (r) => {
          if (timer) clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          if (timer) clearTimeout(timer);
          reject(e);
        },
      });
    });
  }

  private write(data: string | Buffer): void {
    if (this.failure) return;
    this.socket.write(data);
  }

  /**
   * Sends one message to one recipient; resolves with the final reply, rejects with an
   * SmtpError (a reply to MAIL/RCPT/DATA carries it in `response`). With PIPELINING the
   * pending RSET, MAIL, RCPT and DATA leave in one write.
   */
  async send(envelope: { from: string; to: string; size: number; eightBit: boolean }, raw: Buffer | string | readonly string[], now: number): Promise<string> {
    this.lastUsed = now;
    this.messages++;
    if (this.failure) throw this.failure;
    for (const a of [envelope.from, envelope.to]) {
      // Printable ASCII only: commands are written as latin1, without SMTPUTF8.
      if (/[^!-~]|[<>]/.test(a)) throw new SmtpError('EENVELOPE', `invalid envelope address ${JSON.stringify(a)}`, 'API');
    }
    if (this.maxSize && envelope.size > this.maxSize) {
      throw new SmtpError('EMESSAGE', `Message size larger than allowed ${this.maxSize}`, 'MAIL FROM');
    }
    const ext = this.extensions;
    let params = '';
    if (ext.includes('SIZE')) params += ` SIZE=${envelope.size}`;
    if (envelope.eightBit && ext.includes('8BITMIME')) params += ' BODY=8BITMIME';
    const rset = this.needRset;
    this.needRset = true;
    const commands: [string, string][] = [];
    if (rset) commands.push(['RSET', 'RSET\r\n']);
    commands.push(['MAIL FROM', `MAIL FROM:<${envelope.from}>${params}\r\n`], ['RCPT TO', `RCPT TO:<${envelope.to}>\r\n`], ['DATA', 'DATA\r\n']);

    const replies: string[] = [];
    if (ext.includes('PIPELINING')) {
      const pending = commands.map(([name]) => this.reply(undefined, name));
      this.socket.cork();
      for (const [, c] of commands) this.write(Buffer.from(c, 'latin1'));
      this.socket.uncork();
      // Settle every reply (a later one may fail too) before judging the first.
      const settled = await Promise.allSettled(pending);
      for (const s of settled) {
        if (s.status === 'rejected') {
          // A refusal followed by the server hanging up (421 at MAIL, say): the reply is the verdict.
          if (replies.some((r) => !/^[23]/.test(r))) break;
          throw s.reason;
        }
        replies.push(s.value);
      }
    } else {
      for (const [name, c] of commands) {
        this.write(Buffer.from(c, 'latin1'));
        const r = await this.reply(undefined, name);
        replies.push(r);
        if (!(name === 'DATA' ? r.startsWith('354') : r.startsWith('2'))) break;
      }
    }
    let i = 0;
    if (rset) {
      // A reused connection that cannot even reset is stale, not a verdict on this message.
      if (!replies[i].startsWith('2')) {
        // No `response`: the reply is about the connection, not a verdict on the message.
        const e = new SmtpError('ECONNECTION', `connection not reusable (RSET: ${replies[i].slice(0, 200)})`, 'RSET');
        this.fail(e);
        this.socket.destroy();
        throw e;
      }
      i++;
    }
    const [mail, rcpt, data] = [replies[i], replies[i + 1], replies[i + 2]];
    const dataOpen = data?.startsWith('354') ?? false;
    if (dataOpen && !(mail.startsWith('2') && rcpt?.startsWith('2'))) {
      // Some servers open DATA although the envelope failed: end it empty, keep the verdict.
      this.write('.\r\n');
      await this.reply(undefined, 'DATA').catch(() => {});
    }
    if (!mail.startsWith('2')) throw new SmtpError('EENVELOPE', 'sender refused', 'MAIL FROM', mail);
    if (rcpt === undefined) throw new SmtpError('EPROTOCOL', 'no RCPT reply', 'RCPT TO');
    if (!rcpt.startsWith('2')) throw new SmtpError('EENVELOPE', 'recipient refused', 'RCPT TO', rcpt);
    if (data === undefined) throw new SmtpError('EPROTOCOL', 'no DATA reply', 'DATA');
    if (!dataOpen) throw new SmtpError('EMESSAGE', 'DATA refused', 'DATA', data);

    const final = this.reply(undefined, 'DATA');
    this.write(dataBlock(raw));
    const r = await final;
    if (!r.startsWith('2')) throw new SmtpError('EMESSAGE', 'message refused', 'DATA', r);
    return r;
  }

  /**
   * Marks the transaction finished. The RSET itself goes out pipelined with the next MAIL
   * (RFC 2920 allows RSET in a command group), so reuse costs no extra round trip; a dead
   * connection shows at that point and the send retries on a fresh one.
   */
  async reset(): Promise<void> {
    if (this.failure) throw this.failure;
    this.needRset = true;
  }

  /** QUIT, then resolves once the TCP connection is gone (at most ~2 s). */
  quit(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      if (!this.failure) {
        this.reply(undefined, 'QUIT').then(
          () => this.socket.end(),
          () => {},
        );
        this.write('QUIT\r\n');
      }
    }
    const t = setTimeout(() => this.socket.destroy(), QUIT_WAIT_MS);
    t.unref();
    if (this.failure) this.socket.destroy();
    return this.closedPromise.finally(() => clearTimeout(t));
  }

  /** Closes at once; resolves once the TCP connection is gone. */
  destroy(): Promise<void> {
    this.closed = true;
    this.socket.destroy();
    return this.closedPromise;
  }
}
