/**
 * One SMTP client session to a remote MX, over nodemailer's SMTPConnection: it is well kept,
 * pipelines MAIL/RCPT/DATA (RFC 2920), dot-stuffs, bounds reply sizes and handles STARTTLS
 * and timeouts; we add what an MTA needs on top: binding to the sending IP, our EHLO name,
 * opportunistic TLS with a single plain-text retry after a failed handshake, and RSET-based
 * reuse for the pool.
 */
import { isIP } from 'node:net';
import type { TLSSocket } from 'node:tls';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import { DELIVERY } from './settings.js';

export interface SessionTarget {
  mxHost: string;
  address: string;
  port: number;
  bindIp: string;
  ehloName: string;
}

export interface TlsPolicy {
  /** Extra CAs to judge (not require) certificates against: recorded as `tlsAuthorized`. */
  ca?: string | Buffer | (string | Buffer)[];
}

/** An error from the SMTP layer with what the classifier needs. */
export interface SmtpFailure {
  /** The server's reply, when the failure was a reply. */
  response?: string;
  responseCode?: number;
  /** nodemailer's error kind: ECONNECTION, ETIMEDOUT, ETLS, EENVELOPE, EMESSAGE, EPROTOCOL, ... */
  code: string;
  /** SMTP stage: CONN, EHLO, STARTTLS, MAIL FROM, RCPT TO, DATA, API. */
  command?: string;
  message: string;
}

export function toFailure(err: unknown): SmtpFailure {
  const e = err as Error & { code?: string; response?: string; responseCode?: number; command?: string };
  return {
    response: typeof e?.response === 'string' ? e.response : undefined,
    responseCode: typeof e?.responseCode === 'number' ? e.responseCode : undefined,
    code: e?.code ?? 'EUNKNOWN',
    command: e?.command,
    message: e?.message ?? String(err),
  };
}

/** nodemailer keeps the EHLO extension list private; we read it to choose 8bit vs encoded bodies. */
interface ConnectionInternals {
  _supportedExtensions?: string[];
  _socket?: TLSSocket | false | null;
}

export class SmtpSession {
  readonly createdAt: number;
  lastUsed: number;
  messages = 0;
  closed = false;
  /** STARTTLS failed on the first connection and this one is plain text (recorded). */
  tlsFallback = false;

  private constructor(
    private readonly conn: SMTPConnection,
    readonly target: SessionTarget,
    now: number,
  ) {
    this.createdAt = now;
    this.lastUsed = now;
    conn.on('error', () => {
      this.closed = true;
    });
    conn.on('end', () => {
      this.closed = true;
    });
  }

  get tls(): boolean {
    return this.conn.secure;
  }

  /** Whether the certificate chain verified against the system or configured CAs. */
  get tlsAuthorized(): boolean {
    const s = (this.conn as unknown as ConnectionInternals)._socket;
    return !!(s && this.conn.secure && s.authorized);
  }

  get extensions(): string[] {
    return (this.conn as unknown as ConnectionInternals)._supportedExtensions ?? [];
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
      if (!(err as { tlsHandshake?: boolean }).tlsHandshake) throw err;
      const s = await SmtpSession.connect(target, tls, true, now);
      s.tlsFallback = true;
      return s;
    }
  }

  private static connect(target: SessionTarget, tls: TlsPolicy, plain: boolean, now: () => number): Promise<SmtpSession> {
    const conn = new SMTPConnection({
      host: target.address,
      port: target.port,
      secure: false,
      ignoreTLS: plain,
      // A STARTTLS refused with a reply continues in plain text on the same connection.
      opportunisticTLS: true,
      name: target.ehloName,
      localAddress: target.bindIp,
      connectionTimeout: DELIVERY.connectTimeoutMs,
      greetingTimeout: DELIVERY.greetingTimeoutMs,
      socketTimeout: DELIVERY.socketTimeoutMs,
      socketCloseTimeout: 2_000,
      // Opportunistic TLS authenticates nothing (RFC 7435): any certificate is accepted and
      // whether it verified is recorded. SNI names the MX host.
      tls: {
        rejectUnauthorized: false,
        servername: isIP(target.mxHost) ? undefined : target.mxHost,
        ...(tls.ca ? { ca: tls.ca } : {}),
      },
      logger: false,
    });
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (err: Error & { code?: string; originalCode?: string; tlsHandshake?: boolean }) => {
        if (settled) return;
        settled = true;
        // The handshake failed if nodemailer was mid-upgrade or OpenSSL raised the error;
        // it reports those as ETLS or as a socket error (ESOCKET) depending on the moment.
        err.tlsHandshake = !plain && (err.code === 'ETLS' || conn.upgrading === true || /^ERR_SSL/.test(err.originalCode ?? ''));
        conn.close();
        reject(err);
      };
      conn.once('error', fail);
      conn.connect((err) => {
        if (err) return fail(err);
        if (settled) return;
        settled = true;
        resolve(new SmtpSession(conn, target, now()));
      });
    });
  }

  /** Sends one message; resolves with the final reply, rejects with an SmtpFailure-shaped error. */
  send(envelope: { from: string; to: string; size: number; eightBit: boolean }, raw: Buffer, now: number): Promise<string> {
    this.lastUsed = now;
    this.messages++;
    return new Promise((resolve, reject) => {
      this.conn.send(
        { from: envelope.from, to: [envelope.to], size: envelope.size, use8BitMime: envelope.eightBit },
        raw,
        (err, info) => (err ? reject(err) : resolve(info.response)),
      );
    });
  }

  /** RSET: clears the transaction and proves the connection is alive before reuse. */
  reset(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.closed) return reject(new Error('connection closed'));
      this.conn.reset((err) => (err ? reject(err) : resolve()));
    });
  }

  /** QUIT, then resolves once the TCP connection is gone (at most ~2 s). */
  quit(): Promise<void> {
    const gone = this.socketGone();
    if (!this.closed) {
      this.closed = true;
      try {
        this.conn.quit();
      } catch {
        this.conn.close();
      }
    }
    // A server that never answers QUIT must not keep the socket.
    const t = setTimeout(() => this.hardClose(), 2_000);
    t.unref();
    return gone.finally(() => clearTimeout(t));
  }

  /** Closes at once; resolves once the TCP connection is gone. */
  destroy(): Promise<void> {
    const gone = this.socketGone();
    this.closed = true;
    this.hardClose();
    return gone;
  }

  private hardClose(): void {
    this.conn.close();
    const s = (this.conn as unknown as ConnectionInternals)._socket;
    if (s && !s.destroyed) s.destroy();
  }

  private socketGone(): Promise<void> {
    const s = (this.conn as unknown as ConnectionInternals)._socket;
    if (!s || s.destroyed) return Promise.resolve();
    return new Promise((resolve) => s.once('close', () => resolve()));
  }
}
