/**
 * Postfix's `smtp-sink` / `smtp-source` test programs, for benchmark baselines
 * (raw smtp-source → smtp-sink rate) and as a fast, dumb remote MX.
 *
 * `startPostfixSmtpSink` runs smtp-sink with `-c` (running counters on stdout:
 * "sess=N quit=N mesg=N", parsed into `count()`); with `countOnly: false` it also dumps
 * each message to a temp dir (`-d`), readable with `dumps()` — much slower.
 */
import { once } from 'node:events';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort, killProcess, pollUntil, setprivBinary, spawnDaemon, StopPolling, tailLines } from './dns.js';

export interface StartPostfixSmtpSinkOptions {
  /** Loopback address (default 127.0.0.1). */
  host?: string;
  /** Fixed port (default: a free one). */
  port?: number;
  /** Only count messages (default true); false also dumps each message to a temp dir. */
  countOnly?: boolean;
  /** Max simultaneous connections smtp-sink serves (`-m`, default 1024). */
  maxConnections?: number;
  /** listen(2) backlog (default 1024). */
  backlog?: number;
  /** Extra smtp-sink flags, e.g. `['-r', 'RCPT']` to soft-reject every RCPT. */
  extraArgs?: string[];
}

export interface PostfixSmtpSink {
  host: string;
  port: number;
  /** smtp-sink's process id (benchmarks read its CPU time). */
  pid: number | undefined;
  /** Messages received so far ("." seen), from smtp-sink's `-c` counter. */
  count(): number;
  /** SMTP sessions seen so far (includes the harness's own readiness probe). */
  sessions(): number;
  /** Resolves once `count() >= n`. */
  waitForCount(n: number, timeoutMs?: number): Promise<void>;
  /** Dumped messages (countOnly: false), each with smtp-sink's X-* headers first. */
  dumps(): Promise<Buffer[]>;
  /** Kills smtp-sink and removes temp files. Idempotent. */
  stop(): Promise<void>;
}

/** Reads the SMTP greeting and quits; resolves with the greeting line. */
/** Reads an SMTP server's greeting line (also the relay harness's readiness probe). */
export async function probeGreeting(host: string, port: number): Promise<string> {
  const sock = connect({ host, port });
  sock.setTimeout(1000, () => sock.destroy(new Error('greeting timeout')));
  try {
    let buf = '';
    for await (const chunk of sock) {
      buf += (chunk as Buffer).toString('latin1');
      if (buf.includes('\n')) break;
    }
    sock.end('QUIT\r\n');
    return buf.split('\r\n')[0]!;
  } finally {
    sock.destroy();
  }
}

/** Starts Debian's smtp-sink on loopback. */
export async function startPostfixSmtpSink(opts: StartPostfixSmtpSinkOptions = {}): Promise<PostfixSmtpSink> {
  const host = opts.host ?? '127.0.0.1';
  const binary = findBinary('smtp-sink');
  const hostname = `lm-sink-${randomBytes(4).toString('hex')}.test`;
  const dumpDir = opts.countOnly === false ? await mkdtemp(join(tmpdir(), 'lm-smtp-sink-')) : undefined;
  // As root, smtp-sink refuses to run without dropping privileges. Start it as nobody via
  // setpriv (keeps the parent-death signal, unlike smtp-sink's own -u) when possible.
  const isRoot = process.getuid?.() === 0;
  const runAsNobody = isRoot && setprivBinary() !== null;
  if (dumpDir && isRoot) await chmod(dumpDir, 0o777);

  let counters = { sess: 0, quit: 0, mesg: 0 };
  let partial = '';
  const parse = (chunk: string) => {
    const parts = (partial + chunk).split(/[\r\n]/);
    partial = parts.pop() ?? '';
    for (const part of parts) {
      const m = /sess=(\d+)\s+quit=(\d+)\s+mesg=(\d+)/.exec(part);
      if (m) counters = { sess: Number(m[1]), quit: Number(m[2]), mesg: Number(m[3]) };
    }
  };

  let child: ReturnType<typeof spawnDaemon> | undefined;
  let stderr: ReturnType<typeof tailLines> | undefined;
  let port = 0;
  try {
    for (let attempt = 0; ; attempt++) {
      port = opts.port ?? (await findFreePort(host));
      const args = [
        '-c',
        '-h', hostname,
        '-m', String(opts.maxConnections ?? 1024),
        ...(isRoot && !runAsNobody ? ['-u', 'nobody'] : []),
        ...(dumpDir ? ['-d', join(dumpDir, 'msg.')] : []),
        ...(opts.extraArgs ?? []),
        `inet:${host}:${port}`,
        String(opts.backlog ?? 1024),
      ];
      child = spawnDaemon(binary, args, { runAsNobody });
      stderr = tailLines(child.stderr);
      child.stdout?.setEncoding('utf8');
      child.stdout?.on('data', parse);
      const proc = child;
      try {
        await pollUntil(
          async () => {
            if (proc.exitCode !== null || proc.signalCode !== null) throw new StopPolling('smtp-sink exited');
            const greeting = await probeGreeting(host, port);
            // a foreign server on a raced port would greet with another name
            if (!greeting.includes(hostname)) throw new StopPolling(`unexpected greeting "${greeting}"`);
            return true;
          },
          10_000,
          () => `postfix smtp-sink did not start on ${host}:${port}`,
        );
        break;
      } catch (err) {
        await killProcess(proc);
        const log = stderr.text();
        if (opts.port === undefined && attempt < 5 && /address already in use|unexpected greeting/i.test(`${log} ${(err as Error).message}`)) continue;
        throw new Error(`${(err as Error).message}\n${log}`);
      }
    }
  } catch (err) {
    if (dumpDir) await rm(dumpDir, { recursive: true, force: true });
    throw err;
  }

  const proc = child;
  let stopped = false;
  return {
    host,
    port,
    pid: proc.pid,
    count: () => counters.mesg,
    sessions: () => counters.sess,
    async waitForCount(n, timeoutMs = 30_000) {
      await pollUntil(
        () => {
          if (proc.exitCode !== null) throw new StopPolling('smtp-sink exited');
          return counters.mesg >= n;
        },
        timeoutMs,
        () => `postfix smtp-sink: ${counters.mesg} of ${n} messages after ${timeoutMs} ms\n${stderr?.text() ?? ''}`,
        10,
      );
    },
    async dumps() {
      if (!dumpDir) throw new Error('postfix smtp-sink: started with countOnly, nothing dumped');
      const names = (await readdir(dumpDir)).sort();
      return Promise.all(names.map((n) => readFile(join(dumpDir, n))));
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await killProcess(proc);
      if (dumpDir) await rm(dumpDir, { recursive: true, force: true });
    },
  };
}

export interface RunSmtpSourceOptions {
  host?: string;
  port: number;
  /** Total messages to send (`-m`). */
  messages: number;
  /** Parallel SMTP sessions (`-s`, default 1). */
  sessions?: number;
  /** Payload bytes per message, excluding headers (`-l`, default 1000). */
  sizeBytes?: number;
  /** Recipients per message (`-r`, default 1). */
  recipients?: number;
  /** Send all messages of a session over one connection (`-d`), default false (one connection per message). */
  reuseConnection?: boolean;
  from?: string;
  to?: string;
  /** HELO name (`-M`), default `source.test`. */
  helo?: string;
  timeoutMs?: number;
}

export interface SmtpSourceResult {
  /** Wall time of the smtp-source run, including its process start (~1–2 ms). */
  elapsedMs: number;
  messages: number;
  /** messages / second. */
  rate: number;
}

/** Runs Debian's smtp-source against host:port and measures the elapsed time. */
export async function runSmtpSource(opts: RunSmtpSourceOptions): Promise<SmtpSourceResult> {
  const binary = findBinary('smtp-source');
  const args = [
    '-s', String(opts.sessions ?? 1),
    '-m', String(opts.messages),
    '-l', String(opts.sizeBytes ?? 1000),
    '-r', String(opts.recipients ?? 1),
    '-f', opts.from ?? 'bench@source.test',
    '-t', opts.to ?? 'sink@sink.test',
    '-M', opts.helo ?? 'source.test',
    ...(opts.reuseConnection ? ['-d'] : []),
    `inet:${opts.host ?? '127.0.0.1'}:${opts.port}`,
  ];
  const started = process.hrtime.bigint();
  const child = spawnDaemon(binary, args);
  const stderr = tailLines(child.stderr);
  const stdout = tailLines(child.stdout);
  const timeoutMs = opts.timeoutMs ?? 120_000;
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
  clearTimeout(timer);
  const elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  if (code !== 0) {
    throw new Error(`smtp-source ${args.join(' ')} failed (code ${code}, signal ${signal})\n${stdout.text()}\n${stderr.text()}`.trim());
  }
  return { elapsedMs, messages: opts.messages, rate: (opts.messages * 1000) / elapsedMs };
}
