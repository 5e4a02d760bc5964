/**
 * Postfix as a relay, for `npm run bench:mta` with BENCH_POSTFIX=1: a throwaway Postfix
 * instance with its own config_directory, queue_directory and data_directory in a temp dir,
 * listening on 127.0.0.20 and relaying everything to the bench's smtp-sink. Fed by
 * smtp-source; measured from the first message in to the last one accepted at the sink.
 * No TLS. Postfix does not sign: with `milter`, OpenDKIM signs (bench/mta-peers.ts). Needs
 * root (Postfix's master runs as root).
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort } from '../test/harness/dns.js';
import { runSmtpSource } from '../test/harness/smtp-sink-postfix.js';
import { peerCpuMeter, type PeerCpu } from './cpu.js';
import { diskMeter, type DiskPerUnit } from './disk.js';

export const HOST = '127.0.0.20';

// Postfix reports fatal errors on a terminal or to syslog only; `script` gives it a terminal.
export function run(bin: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('script', ['-qec', [bin, ...args].join(' '), '/dev/null'], { timeout: 60_000 }, (err, stdout) =>
      err ? reject(new Error(`${bin} ${args.join(' ')}: ${stdout.trim() || err.message}`)) : resolve(stdout),
    );
  });
}

export const MASTER_CF = (port: number) => `
${HOST}:${port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`;

export async function runPostfixRelay(o: {
  sinkHost: string;
  sinkPort: number;
  sinkCount: () => number;
  messages: number;
  sizeBytes: number;
  /** A milter every accepted message passes (e.g. OpenDKIM: `inet:127.0.0.1:8891`). */
  milter?: string;
  /** Envelope and header sender for smtp-source (the milter signs its domain). */
  from?: string;
  /** Messages relayed before the clock starts (the same treatment as every system in the run). */
  warmup?: number;
  /** The sink's process, for its CPU time. */
  sinkPid?: number;
  /** Processes that work for this Postfix (the milter), counted with it. */
  helperPids?: number[];
}): Promise<{ rate: number; elapsedMs: number; cpu: PeerCpu; disk: DiskPerUnit | null }> {
  const postfix = findBinary('postfix');
  const dir = mkdtempSync(join(tmpdir(), 'lm-bench-postfix-'));
  const etc = join(dir, 'etc');
  chmodSync(dir, 0o755); // the postfix user must reach its queue and data directories
  const port = await findFreePort(HOST);
  mkdirSync(etc);
  writeFileSync(
    join(etc, 'main.cf'),
    [
      'compatibility_level = 3.6',
      `queue_directory = ${join(dir, 'spool')}`,
      `data_directory = ${join(dir, 'data')}`,
      'mail_owner = postfix',
      'setgid_group = postdrop',
      'myhostname = relay.bench.test',
      'mydestination =',
      'local_recipient_maps =',
      'alias_maps =',
      'alias_database =',
      // Postfix insists the address be configured on an interface; 127.0.0.20 is reachable on
      // lo but not listed, so the listener address goes into master.cf instead.
      'inet_interfaces = 127.0.0.1',
      'inet_protocols = ipv4',
      'mynetworks = 127.0.0.0/8',
      'smtpd_relay_restrictions = permit_mynetworks, reject',
      `relayhost = [${o.sinkHost}]:${o.sinkPort}`,
      'smtp_bind_address = 127.0.0.2',
      'smtp_tls_security_level = none',
      'smtpd_tls_security_level = none',
      'default_destination_concurrency_limit = 100',
      'smtp_destination_concurrency_limit = 100',
      'relay_destination_concurrency_limit = 100',
      'default_process_limit = 200',
      'smtpd_client_connection_count_limit = 0',
      'smtpd_client_connection_rate_limit = 0',
      'in_flow_delay = 0',
      `maillog_file_prefixes = ${dir}`,
      `maillog_file = ${join(dir, 'maillog')}`,
      'biff = no',
      // A milter that fails must fail the message, not let it through unsigned.
      ...(o.milter ? [`smtpd_milters = ${o.milter}`, 'milter_default_action = tempfail', 'milter_protocol = 6'] : []),
    ].join('\n') + '\n',
  );
  writeFileSync(join(etc, 'master.cf'), MASTER_CF(port));
  try {
    mkdirSync(join(dir, 'spool'));
    mkdirSync(join(dir, 'data'));
    await run('/bin/chown', ['postfix', join(dir, 'data')]);
    await run(postfix, ['-c', etc, 'check']); // creates the queue tree
    await run(postfix, ['-c', etc, 'start']);
    await new Promise((r) => setTimeout(r, 1_000));
    const relay = async (messages: number) => {
      const base = o.sinkCount();
      await runSmtpSource({ host: HOST, port, messages, sessions: 50, sizeBytes: o.sizeBytes, reuseConnection: true, timeoutMs: 600_000, from: o.from, to: 'user@d0.bench.test' });
      const deadline = Date.now() + 600_000;
      while (o.sinkCount() < base + messages) {
        if (Date.now() > deadline) throw new Error(`postfix relayed only ${o.sinkCount() - base} of ${messages}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const warm = Math.min(o.warmup ?? 0, o.messages);
    if (warm > 0) await relay(warm);
    // master.pid holds the pid right-aligned in a fixed-width field.
    const master = Number(readFileSync(join(dir, 'spool', 'pid', 'master.pid'), 'utf8').trim());
    const disk = await diskMeter();
    const meter = peerCpuMeter([master, ...(o.helperPids ?? [])], o.sinkPid);
    const start = performance.now();
    await relay(o.messages);
    const elapsedMs = performance.now() - start;
    const cpu = meter.stop(o.messages);
    return { rate: (o.messages * 1000) / elapsedMs, elapsedMs, cpu, disk: await disk.stop(o.messages) };
  } finally {
    await run(postfix, ['-c', etc, 'stop']).catch(() => {});
    await new Promise((r) => setTimeout(r, 500));
    if (!process.env.BENCH_KEEP_POSTFIX) rmSync(dir, { recursive: true, force: true });
  }
}
