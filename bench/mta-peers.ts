/**
 * The DKIM-signing peers of `npm run bench:mta` (BENCH_POSTFIX=1, root): what an operator
 * would run instead of us, each signing RSA-2048 with the bench's key, fed by smtp-source and
 * delivering to the bench's smtp-sink:
 *   - Postfix as relay with Debian's OpenDKIM as its milter (bench/mta-postfix.ts + here);
 *   - Haraka (npm `Haraka`, installed at bench time into a temp dir, never a dependency of
 *     ours) with its dkim plugin, outbound delivery from its on-disk queue, nodes=2.
 * `verifyPeer` sends a sample through a peer to a dumping smtp-sink and checks every message
 * with dkimpy, so no peer is measured doing less work than we do.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort, killProcess, pollUntil, spawnDaemon, StopPolling, tailLines, type DnsServer } from '../test/harness/dns.js';
import { probeGreeting, runSmtpSource, startPostfixSmtpSink } from '../test/harness/smtp-sink-postfix.js';
import { dkimpyVerify } from '../test/mta/delivery/dkimpy.js';
import { peerCpuMeter, type PeerCpu } from './cpu.js';
import { diskMeter, type DiskPerUnit } from './disk.js';
import { runPostfixRelay } from './mta-postfix.js';

export const SIGN_DOMAIN = 'sender.bench.test';
export const SELECTOR = 'bench1';
const FROM = `news@${SIGN_DOMAIN}`;
const HARAKA_HOST = '127.0.0.21';

export interface PeerRun {
  rate: number;
  elapsedMs: number;
  /** CPU per message of the peer's processes, of the smtp-source runs that fed it and of the sink. */
  cpu: PeerCpu;
  /** Disk I/O per message while it ran, the peer's queue included (bench/disk.ts). */
  disk: DiskPerUnit | null;
}
export type Peer = (o: {
  sinkHost: string;
  sinkPort: number;
  sinkCount: () => number;
  messages: number;
  sizeBytes: number;
  /** Messages relayed before the clock starts, as our own runs do (bench/mta-e2e.ts WARMUP). */
  warmup?: number;
  /** The sink's process, for its CPU time. */
  sinkPid?: number;
}) => Promise<PeerRun>;

/** Waits until the sink has counted `target` messages (10 minutes at most). */
async function drained(count: () => number, target: number, what: string): Promise<void> {
  const deadline = Date.now() + 600_000;
  while (count() < target) {
    if (Date.now() > deadline) throw new Error(`${what} relayed only ${count()} of ${target}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** OpenDKIM (Debian `opendkim`) in the foreground as a milter on loopback, signing every message from SIGN_DOMAIN. */
async function startOpenDkim(rsaPem: string): Promise<{ milter: string; pid: number | undefined; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-opendkim-'));
  const port = await findFreePort('127.0.0.1');
  writeFileSync(join(dir, 'key.pem'), rsaPem, { mode: 0o600 });
  writeFileSync(
    join(dir, 'opendkim.conf'),
    [
      'Syslog no',
      'Mode s',
      `Domain ${SIGN_DOMAIN}`,
      `Selector ${SELECTOR}`,
      `KeyFile ${join(dir, 'key.pem')}`,
      `Socket inet:${port}@127.0.0.1`,
      'InternalHosts 127.0.0.0/8',
      'SignatureAlgorithm rsa-sha256',
      'Canonicalization relaxed/relaxed',
      'RequireSafeKeys no',
      'Background no',
      `PidFile ${join(dir, 'pid')}`,
    ].join('\n') + '\n',
  );
  const child = spawnDaemon(findBinary('opendkim'), ['-f', '-x', join(dir, 'opendkim.conf')]);
  const log = tailLines(child.stderr);
  try {
    await pollUntil(
      () => {
        if (child.exitCode !== null) throw new StopPolling(`opendkim exited: ${log.text()}`);
        return listening('127.0.0.1', port);
      },
      10_000,
      () => `opendkim did not listen on 127.0.0.1:${port}\n${log.text()}`,
    );
  } catch (err) {
    await killProcess(child);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    milter: `inet:127.0.0.1:${port}`,
    pid: child.pid,
    async stop() {
      await killProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Whether a TCP listener answers on host:port. */
function listening(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/** Postfix relay with OpenDKIM as its milter. */
export function postfixOpenDkim(rsaPem: string): Peer {
  return async (o) => {
    const dkim = await startOpenDkim(rsaPem);
    try {
      return await runPostfixRelay({ ...o, milter: dkim.milter, from: FROM, helperPids: dkim.pid === undefined ? [] : [dkim.pid] });
    } finally {
      await dkim.stop();
    }
  };
}

/** Installs Haraka from the registry into a temp dir once per bench (not one of our dependencies). */
export function installHaraka(dir: string): Promise<string> {
  const bin = join(dir, 'node_modules', 'Haraka', 'bin', 'haraka');
  if (existsSync(bin)) return Promise.resolve(bin);
  return new Promise((resolve, reject) => {
    execFile('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--loglevel=error', 'Haraka'], { timeout: 600_000 }, (err, _out, stderr) =>
      err ? reject(new Error(`npm install Haraka: ${stderr || err.message}`)) : resolve(bin),
    );
  });
}

// Relay for loopback clients, and every domain's MX is the bench's sink (Haraka has no
// per-destination port setting; this is its documented get_mx hook).
const ROUTE_PLUGIN = (host: string, port: number) => `
exports.hook_connect_init = function (next, connection) {
  connection.relaying = true;
  next();
};
exports.hook_get_mx = function (next) {
  next(OK, { exchange: '${host}', port: ${port}, priority: 10 });
};
`;

/** Haraka with its dkim plugin signing every message, outbound delivery from its on-disk queue, nodes=2. */
export function haraka(harakaBin: string, rsaPem: string): Peer {
  return async (o) => {
    const dir = mkdtempSync(join(tmpdir(), 'lm-bench-haraka-'));
    chmodSync(dir, 0o755);
    const port = await findFreePort(HARAKA_HOST);
    const cfg = join(dir, 'config');
    // `haraka -i` writes the default install (connection.ini and the rest); we then override.
    await new Promise<void>((resolve, reject) =>
      execFile(process.execPath, [harakaBin, '-i', dir], { timeout: 60_000 }, (err, _o, stderr) => (err ? reject(new Error(`haraka -i: ${stderr || err.message}`)) : resolve())),
    );
    mkdirSync(join(dir, 'queue'), { recursive: true });
    writeFileSync(join(cfg, 'smtp.ini'), `listen=${HARAKA_HOST}:${port}\nnodes=2\n`);
    writeFileSync(join(cfg, 'me'), 'relay.bench.test\n');
    writeFileSync(join(cfg, 'plugins'), 'bench_route\ndkim\n');
    writeFileSync(join(cfg, 'log.ini'), '[main]\nlevel=warn\n');
    writeFileSync(join(cfg, 'outbound.ini'), 'enable_tls=false\nconcurrency_max=100\n');
    writeFileSync(join(cfg, 'dkim.ini'), `[sign]\nenabled=true\nselector=${SELECTOR}\ndomain=${SIGN_DOMAIN}\n[verify]\nenabled=false\n`);
    writeFileSync(join(cfg, 'dkim.private.key'), rsaPem);
    writeFileSync(join(dir, 'plugins', 'bench_route.js'), ROUTE_PLUGIN(o.sinkHost, o.sinkPort));
    const child: ChildProcess = spawn(process.execPath, [harakaBin, '-c', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    const out = tailLines(child.stdout!);
    const err = tailLines(child.stderr!);
    try {
      await pollUntil(
        async () => {
          if (child.exitCode !== null) throw new StopPolling(`haraka exited: ${out.text()}\n${err.text()}`);
          return (await probeGreeting(HARAKA_HOST, port).catch(() => '')).startsWith('220');
        },
        30_000,
        () => `haraka did not start on ${HARAKA_HOST}:${port}\n${out.text()}\n${err.text()}`,
      );
      // Both cluster workers up before the clock starts.
      await new Promise((r) => setTimeout(r, 1_000));
      const feed = (messages: number) =>
        runSmtpSource({ host: HARAKA_HOST, port, messages, sessions: 50, sizeBytes: o.sizeBytes, reuseConnection: true, timeoutMs: 600_000, from: FROM, to: 'user@d0.bench.test' });
      // Haraka is JavaScript too: V8 compiles its hot paths during its first messages, as ours.
      const warm = Math.min(o.warmup ?? 0, o.messages);
      if (warm > 0) {
        const before = o.sinkCount();
        await feed(warm);
        await drained(o.sinkCount, before + warm, 'haraka (warm-up)');
      }
      const base = o.sinkCount();
      const disk = await diskMeter();
      const meter = peerCpuMeter([child.pid], o.sinkPid);
      const start = performance.now();
      await feed(o.messages);
      await drained(o.sinkCount, base + o.messages, 'haraka');
      const elapsedMs = performance.now() - start;
      const cpu = meter.stop(o.messages);
      return { rate: (o.messages * 1000) / elapsedMs, elapsedMs, cpu, disk: await disk.stop(o.messages) };
    } finally {
      await killProcess(child, 5_000);
      if (!process.env.BENCH_KEEP_POSTFIX) rmSync(dir, { recursive: true, force: true });
    }
  };
}

/**
 * Sends `n` messages through `peer` to a fresh dumping smtp-sink and verifies every one with
 * dkimpy against the bench's DNS; resolves with the pass count, throws when any fails.
 */
export async function verifyPeer(peer: Peer, name: string, dns: DnsServer, sinkHost: string, n = 10, sizeBytes = 5 * 1024): Promise<number> {
  const sink = await startPostfixSmtpSink({ host: sinkHost, countOnly: false });
  try {
    await peer({ sinkHost, sinkPort: sink.port, sinkCount: () => sink.count(), messages: n, sizeBytes });
    const dumps = await sink.dumps();
    if (dumps.length < n) throw new Error(`${name}: ${dumps.length} of ${n} messages dumped`);
    let pass = 0;
    for (const msg of dumps) {
      const results = await dkimpyVerify(msg, dns);
      if (results.length === 0 || !results.includes('pass')) throw new Error(`${name}: a message at the sink does not verify with dkimpy (${results.join(',') || 'unsigned'}):\n${msg.subarray(0, 1500).toString()}`);
      pass++;
    }
    return pass;
  } finally {
    await sink.stop();
  }
}
