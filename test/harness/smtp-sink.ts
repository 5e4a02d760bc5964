/**
 * A scriptable SMTP server ("remote MX") on loopback, built on `smtp-server`, that records
 * every accepted message with its envelope, raw bytes and the client's connection facts.
 *
 * Default behaviour: accept everything, advertise PIPELINING, 8BITMIME, SMTPUTF8, SIZE
 * (50 MB) and STARTTLS when `tls` is given; no AUTH; no reverse DNS lookups.
 * Scripting, in order of precedence for each stage (connect, mail, rcpt, data):
 * `failNext` rules (consumed as they match), the `rcptRule` (rcpt stage only), the
 * `script` option, then accept. `setConnectBehavior` resets/closes/hangs new connections.
 */
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import {
  SMTPServer,
  type SMTPServerAddress,
  type SMTPServerAddressArgs,
  type SMTPServerOptions,
  type SMTPServerSession,
} from 'smtp-server';

export type SmtpStage = 'connect' | 'mail' | 'rcpt' | 'data';

/** An SMTP reply, e.g. `{ code: 451, message: '4.7.1 Try again later' }` (sent as-is). */
export interface SmtpReply {
  code: number;
  message: string;
}

/**
 * What to do at a stage: reply with a code (`>= 400` rejects, 2xx accepts with that text,
 * DATA only), never answer (`hang`), drop the TCP connection (`disconnect`), and/or wait
 * `delayMs` first (without a code: accept after the delay).
 */
export interface SmtpAction {
  code?: number;
  message?: string;
  hang?: boolean;
  disconnect?: boolean;
  delayMs?: number;
}

/** Connection facts visible to scripts and recorded with messages. */
export interface SmtpSessionInfo {
  /** smtp-server's per-connection id. */
  sessionId: string;
  /** 1-based order in which the sink accepted this TCP connection. */
  connectionNumber: number;
  remoteAddress: string;
  remotePort: number;
  localAddress: string;
  localPort: number;
  /** The EHLO/HELO argument ('' before the client sent one). */
  clientHostname: string;
  /** STARTTLS in effect. */
  secure: boolean;
}

export interface SmtpScriptContext {
  stage: SmtpStage;
  session: SmtpSessionInfo;
  /** MAIL FROM address ('' for the null sender), undefined at connect. */
  mailFrom?: string;
  /** The recipient being checked (rcpt stage). */
  rcpt?: string;
  /** Recipients accepted so far in this transaction. */
  rcptTo: string[];
  /** The message bytes (data stage). */
  data?: Buffer;
}

export type SmtpScript = (ctx: SmtpScriptContext) => SmtpAction | undefined | void | Promise<SmtpAction | undefined | void>;

/** A one-shot (or `count`-shot) scripted response, see `SmtpSink.failNext`. */
export interface SmtpFailRule extends SmtpAction {
  stage: SmtpStage;
  /** How many matching events it applies to (default 1). */
  count?: number;
  /** Only events for which this returns true consume the rule. */
  match?: (ctx: SmtpScriptContext) => boolean;
}

export interface SinkMessage {
  /** `${sessionId}.${transaction}`, also used in the 250 reply ("queued as ..."). */
  id: string;
  sessionId: string;
  connectionNumber: number;
  mailFrom: string;
  /** MAIL FROM parameters (upper-case keys), e.g. `{ BODY: '8BITMIME', SMTPUTF8: true }`. */
  mailArgs: SMTPServerAddressArgs;
  rcptTo: string[];
  /** Message bytes as received (dot-unstuffed, without the terminating `.`). */
  data: Buffer;
  remoteAddress: string;
  remotePort: number;
  localAddress: string;
  localPort: number;
  /** The EHLO/HELO name. */
  clientHostname: string;
  /** 'EHLO' | 'HELO' | 'LHLO'. */
  heloCommand: string;
  secure: boolean;
  tlsProtocol?: string;
  tlsCipher?: string;
  smtpUtf8: boolean;
  bodyType: string;
  receivedAt: Date;
}

export interface SinkRejection {
  stage: SmtpStage;
  code: number;
  message: string;
  sessionId: string;
  remoteAddress: string;
  mailFrom?: string;
  rcpt?: string;
  at: Date;
}

export interface SinkSession extends SmtpSessionInfo {
  openedAt: Date;
  closedAt?: Date;
  /** Messages accepted over this connection. */
  messages: number;
}

/** What new connections get: normal SMTP, a TCP RST, an immediate close, or silence. */
export type ConnectBehavior = 'accept' | 'reset' | 'close' | 'hang';

export interface StartSmtpSinkOptions {
  /** Loopback address to listen on (default 127.0.0.1). */
  host?: string;
  /** Default 0 (ephemeral); 25 works when running as root. */
  port?: number;
  /** Enables STARTTLS with this key/cert (PEM). */
  tls?: { key: string | Buffer; cert: string | Buffer; ca?: string | Buffer };
  /** Greeting / EHLO hostname (default `mx.sink.test`). */
  name?: string;
  /** SIZE limit in bytes (default 50 MB). */
  size?: number;
  /** Default script for every stage, see SmtpScript. */
  script?: SmtpScript;
  /** Per-recipient rule, see `SmtpSink.setRcptRule`. */
  rcptRule?: (rcpt: string, ctx: SmtpScriptContext) => SmtpAction | undefined;
  /** Idle timeout after which the server drops a client (default 60 s). */
  socketTimeoutMs?: number;
  /** Escape hatch for other smtp-server options (e.g. `hidePIPELINING`, `maxClients`). */
  serverOptions?: Partial<SMTPServerOptions>;
}

export interface SmtpSink {
  host: string;
  port: number;
  /** Accepted messages, in order of acceptance. */
  readonly messages: SinkMessage[];
  /** Replies >= 400 the sink sent because of a script or rule. */
  readonly rejections: SinkRejection[];
  /** SMTP sessions (connections that reached smtp-server), in order. */
  readonly sessions: SinkSession[];
  /** Errors emitted by smtp-server (client resets etc.), for debugging. */
  readonly errors: Error[];
  /** TCP connections accepted since start/reset. */
  readonly connections: number;
  /** Connections open right now. */
  readonly openConnections: number;
  /** Highest number of simultaneously open connections since start/reset. */
  readonly peakConnections: number;
  /** Scripts the next `count` (default 1) events of `stage`, e.g. a 451 at RCPT. */
  failNext(rule: SmtpFailRule): void;
  /** Sets (or clears) the per-recipient rule: return an action for a recipient, or undefined to accept. */
  setRcptRule(rule: ((rcpt: string, ctx: SmtpScriptContext) => SmtpAction | undefined) | undefined): void;
  /** Changes what new connections get. */
  setConnectBehavior(behavior: ConnectBehavior): void;
  /** Resolves with the messages once at least `n` were accepted. */
  waitForMessages(n: number, timeoutMs?: number): Promise<SinkMessage[]>;
  /** Resolves once `predicate()` is true (checked after every sink event). */
  waitUntil(predicate: () => boolean, timeoutMs?: number, what?: string): Promise<void>;
  /** Clears recorded state, counters, rules and the connect behaviour (keeps the `script` option). */
  reset(): void;
  /** Stops listening and destroys every open connection. Idempotent. */
  close(): Promise<void>;
}

type Reply = (err?: Error | null, message?: string) => void;

function smtpError(code: number, message: string): Error {
  const err = new Error(message) as Error & { responseCode: number };
  err.responseCode = code;
  return err;
}

/** Starts a recording SMTP sink on loopback. */
export async function startSmtpSink(opts: StartSmtpSinkOptions = {}): Promise<SmtpSink> {
  const host = opts.host ?? '127.0.0.1';
  const messages: SinkMessage[] = [];
  const rejections: SinkRejection[] = [];
  const sessions: SinkSession[] = [];
  const errors: Error[] = [];
  const rawSockets = new Set<Socket>();
  const socketNumbers = new Map<string, number>(); // `${remoteAddress}:${remotePort}` → connection number
  const sessionById = new Map<string, SinkSession>();
  const pendingTimers = new Set<NodeJS.Timeout>();
  let rules: Array<SmtpFailRule & { remaining: number }> = [];
  let rcptRule = opts.rcptRule;
  let connectBehavior: ConnectBehavior = 'accept';
  let connections = 0;
  let open = 0;
  let peak = 0;
  let closed = false;
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const w of [...waiters]) w();
  };

  const sessionInfo = (session: SMTPServerSession): SmtpSessionInfo => {
    const known = sessionById.get(session.id);
    return {
      sessionId: session.id,
      connectionNumber: known?.connectionNumber ?? socketNumbers.get(`${session.remoteAddress}:${session.remotePort}`) ?? 0,
      remoteAddress: session.remoteAddress,
      remotePort: session.remotePort,
      localAddress: session.localAddress,
      localPort: session.localPort,
      clientHostname: session.hostNameAppearsAs || '',
      secure: !!session.secure,
    };
  };

  const contextFor = (stage: SmtpStage, session: SMTPServerSession, extra: Partial<SmtpScriptContext> = {}): SmtpScriptContext => {
    const env = session.envelope;
    const info = sessionInfo(session);
    const rec = sessionById.get(session.id);
    if (rec) {
      rec.clientHostname = info.clientHostname || rec.clientHostname;
      rec.secure = info.secure || rec.secure;
    }
    return {
      stage,
      session: info,
      mailFrom: env?.mailFrom ? env.mailFrom.address : undefined,
      rcptTo: (env?.rcptTo ?? []).map((r) => r.address),
      ...extra,
    };
  };

  const decide = async (ctx: SmtpScriptContext): Promise<SmtpAction | undefined> => {
    const idx = rules.findIndex((r) => r.stage === ctx.stage && (!r.match || r.match(ctx)));
    if (idx >= 0) {
      const rule = rules[idx];
      rule.remaining -= 1;
      if (rule.remaining <= 0) rules.splice(idx, 1);
      return rule;
    }
    if (ctx.stage === 'rcpt' && rcptRule && ctx.rcpt !== undefined) {
      const action = rcptRule(ctx.rcpt, ctx);
      if (action) return action;
    }
    return (await opts.script?.(ctx)) ?? undefined;
  };

  const delay = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        pendingTimers.delete(t);
        resolve();
      }, ms);
      pendingTimers.add(t);
    });

  const topSocketOf = (sessionId: string): Socket | TLSSocket | undefined => {
    for (const c of server.connections) {
      if (c.id === sessionId) return c._socket;
    }
    return undefined;
  };

  /** Runs the decision for a stage and answers through `reply`. */
  const handle = async (ctx: SmtpScriptContext, reply: Reply, acceptMessage?: string): Promise<void> => {
    let action: SmtpAction | undefined;
    try {
      action = await decide(ctx);
    } catch (err) {
      errors.push(err as Error);
      reply(smtpError(451, `4.3.0 sink script failed: ${(err as Error).message}`));
      return;
    }
    if (action?.delayMs) await delay(action.delayMs);
    if (closed) return;
    if (action?.disconnect) {
      const sock = topSocketOf(ctx.session.sessionId);
      if (sock && 'resetAndDestroy' in sock && typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy();
      else sock?.destroy();
      return;
    }
    if (action?.hang) return;
    if (action?.code !== undefined && action.code >= 400) {
      const message = action.message ?? 'Rejected by test sink';
      rejections.push({
        stage: ctx.stage,
        code: action.code,
        message,
        sessionId: ctx.session.sessionId,
        remoteAddress: ctx.session.remoteAddress,
        mailFrom: ctx.mailFrom,
        rcpt: ctx.rcpt,
        at: new Date(),
      });
      notify();
      reply(smtpError(action.code, message));
      return;
    }
    reply(null, action?.message ?? acceptMessage);
  };

  const options: SMTPServerOptions = {
    name: opts.name ?? 'mx.sink.test',
    banner: 'Lettermill test sink',
    size: opts.size ?? 50 * 1024 * 1024,
    authOptional: true,
    disabledCommands: ['AUTH', ...(opts.tls ? [] : ['STARTTLS'])],
    hidePIPELINING: false,
    hide8BITMIME: false,
    hideSMTPUTF8: false,
    disableReverseLookup: true,
    maxAllowedUnauthenticatedCommands: false,
    socketTimeout: opts.socketTimeoutMs ?? 60_000,
    closeTimeout: 1000,
    logger: false,
    ...(opts.tls ? { key: opts.tls.key, cert: opts.tls.cert, ...(opts.tls.ca ? { ca: opts.tls.ca } : {}) } : {}),
    ...opts.serverOptions,

    onConnect(session, callback) {
      const info = sessionInfo(session);
      const record: SinkSession = { ...info, openedAt: new Date(), messages: 0 };
      sessions.push(record);
      sessionById.set(session.id, record);
      notify();
      if (connectBehavior !== 'accept') {
        const sock = topSocketOf(session.id);
        if (connectBehavior === 'reset') sock?.resetAndDestroy();
        else if (connectBehavior === 'close') sock?.end();
        return; // 'hang': never greet
      }
      void handle(contextFor('connect', session), (err) => callback(err ?? null));
    },

    onMailFrom(address: SMTPServerAddress, session, callback) {
      void handle(contextFor('mail', session, { mailFrom: address.address, rcptTo: [] }), (err) => callback(err ?? null));
    },

    onRcptTo(address: SMTPServerAddress, session, callback) {
      void handle(contextFor('rcpt', session, { rcpt: address.address }), (err) => callback(err ?? null));
    },

    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('end', () => {
        const data = Buffer.concat(chunks);
        if (stream.sizeExceeded) {
          callback(smtpError(552, `5.3.4 Message exceeds fixed maximum message size ${options.size}`));
          return;
        }
        const ctx = contextFor('data', session, { data });
        const id = `${session.id}.${session.transaction}`;
        void handle(
          ctx,
          (err, message) => {
            if (!err) {
              const env = session.envelope;
              const tlsInfo = session.tlsOptions || undefined;
              messages.push({
                id,
                sessionId: session.id,
                connectionNumber: ctx.session.connectionNumber,
                mailFrom: env.mailFrom ? env.mailFrom.address : '',
                mailArgs: (env.mailFrom && env.mailFrom.args) || {},
                rcptTo: env.rcptTo.map((r) => r.address),
                data,
                remoteAddress: session.remoteAddress,
                remotePort: session.remotePort,
                localAddress: session.localAddress,
                localPort: session.localPort,
                clientHostname: session.hostNameAppearsAs || '',
                heloCommand: session.openingCommand || '',
                secure: !!session.secure,
                tlsProtocol: tlsInfo?.version,
                tlsCipher: tlsInfo?.name,
                smtpUtf8: !!env.smtpUtf8,
                bodyType: env.bodyType ?? '7bit',
                receivedAt: new Date(),
              });
              const rec = sessionById.get(session.id);
              if (rec) rec.messages += 1;
              notify();
            }
            callback(err ?? null, message);
          },
          `OK: queued as ${id}`,
        );
      });
    },

    onClose(session) {
      const rec = sessionById.get(session.id);
      if (rec) {
        rec.closedAt = new Date();
        rec.clientHostname = session.hostNameAppearsAs || rec.clientHostname;
        rec.secure = !!session.secure || rec.secure;
      }
      notify();
    },
  };

  const server = new SMTPServer(options);
  server.on('error', (err) => {
    errors.push(err);
  });
  server.server.prependListener('connection', (socket: Socket) => {
    connections += 1;
    open += 1;
    peak = Math.max(peak, open);
    rawSockets.add(socket);
    const key = `${socket.remoteAddress}:${socket.remotePort}`;
    socketNumbers.set(key, connections);
    socket.once('close', () => {
      open -= 1;
      rawSockets.delete(socket);
      socketNumbers.delete(key);
      notify();
    });
    notify();
  });

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.server.once('error', onError);
    server.listen(opts.port ?? 0, host, () => {
      server.server.off('error', onError);
      resolve();
    });
  });
  const addr = server.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;

  const waitUntil = (predicate: () => boolean, timeoutMs = 10_000, what = 'condition'): Promise<void> =>
    new Promise((resolve, reject) => {
      if (predicate()) return resolve();
      const check = () => {
        if (predicate()) {
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        }
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        const last = rejections.at(-1);
        reject(
          new Error(
            `SMTP sink ${host}:${port}: timed out after ${timeoutMs} ms waiting for ${what} ` +
              `(messages=${messages.length}, connections=${connections}, rejections=${rejections.length}` +
              `${last ? `, last rejection ${last.code} ${last.message}` : ''}, errors=${errors.map((e) => e.message).join('; ') || 'none'})`,
          ),
        );
      }, timeoutMs);
      waiters.add(check);
    });

  return {
    host,
    port,
    messages,
    rejections,
    sessions,
    errors,
    get connections() {
      return connections;
    },
    get openConnections() {
      return open;
    },
    get peakConnections() {
      return peak;
    },
    failNext(rule) {
      const count = rule.count ?? 1;
      if (count > 0) rules.push({ ...rule, remaining: count });
    },
    setRcptRule(rule) {
      rcptRule = rule;
    },
    setConnectBehavior(behavior) {
      connectBehavior = behavior;
    },
    async waitForMessages(n, timeoutMs = 10_000) {
      await waitUntil(() => messages.length >= n, timeoutMs, `${n} message(s)`);
      return messages;
    },
    waitUntil,
    reset() {
      messages.length = 0;
      rejections.length = 0;
      sessions.length = 0;
      errors.length = 0;
      rules = [];
      rcptRule = opts.rcptRule;
      connectBehavior = 'accept';
      connections = 0;
      peak = open;
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const t of pendingTimers) clearTimeout(t);
      const done = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const c of server.connections) c._socket.destroy();
      for (const s of rawSockets) s.destroy();
      await done;
      waiters.clear();
    },
  };
}
