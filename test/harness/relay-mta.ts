/**
 * Real MTAs as relays on loopback, to produce real bounces: a throwaway Postfix instance
 * (Debian `postfix`) and a throwaway Exim (Debian `exim4-daemon-light`, unpacked from its .deb
 * because the package conflicts with postfix). Each listens on `host:port`, relays everything
 * it is given to `relayTo` (a sink that may answer 550, 452 or never), and sends its own DSNs
 * for the `bounceDomain` to `bouncesTo` (our bounce server). One delivery attempt only: a
 * temporary failure bounces at once (Postfix `maximal_queue_lifetime = 0`, Exim without retry
 * rules), so a test need not wait out a queue lifetime.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findBinary, findFreePort, killProcess, pollUntil, run, spawnDaemon, StopPolling, tailLines } from './dns.js';
import { probeGreeting } from './smtp-sink-postfix.js';

export interface RelayMtaOptions {
  /** Loopback address the MTA listens on (default 127.0.0.1). */
  host?: string;
  /** Where every message is relayed. */
  relayTo: { host: string; port: number };
  /** Where the MTA's own bounces (to addresses of `bounceDomain`) go. */
  bouncesTo: { host: string; port: number };
  /** Domain of the envelope senders (default bounces.lettermill.test). */
  bounceDomain?: string;
  /** Seconds the MTA waits for each reply of the relay target before giving up (default 3). */
  replyTimeoutSec?: number;
}

export interface RelayMta {
  name: 'postfix' | 'exim';
  host: string;
  port: number;
  /** The MTA's log so far (for failure messages). */
  log(): string;
  stop(): Promise<void>;
}

/** Waits for the daemon's greeting, then hands it over; on failure it is stopped and its directory removed. */
async function supervise(
  kind: RelayMta['name'],
  d: { host: string; port: number; name: string; child: ReturnType<typeof spawnDaemon>; dir: string; log: () => string },
): Promise<RelayMta> {
  const remove = async () => {
    await killProcess(d.child);
    // Exim's delivery processes (it re-executes itself) may still be closing their log files
    // when the daemon is gone: an rmdir racing them meets ENOTEMPTY, so it is tried again.
    await rm(d.dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  try {
    await waitForGreeting(d.host, d.port, d.name, () => d.child.exitCode === null, d.log);
  } catch (e) {
    await remove();
    throw e;
  }
  let stopped = false;
  return {
    name: kind,
    host: d.host,
    port: d.port,
    log: d.log,
    async stop() {
      if (stopped) return;
      stopped = true;
      await remove();
    },
  };
}

async function waitForGreeting(host: string, port: number, name: string, alive: () => boolean, log: () => string): Promise<void> {
  await pollUntil(
    async () => {
      if (!alive()) throw new StopPolling(`${name} exited\n${log()}`);
      const g = await probeGreeting(host, port);
      if (!g.includes(name)) throw new StopPolling(`unexpected greeting "${g}"`);
      return true;
    },
    15_000,
    () => `${name} did not start on ${host}:${port}\n${log()}`,
  );
}

// ---------------------------------------------------------------------------------------
// Postfix
// ---------------------------------------------------------------------------------------

/** Why a Postfix instance cannot run here, or null. */
export function postfixUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'a private Postfix instance needs root (its master runs its daemons as the postfix user)';
  try {
    findBinary('postfix');
  } catch {
    return 'Debian package postfix is not installed';
  }
  return null;
}

export async function startPostfixRelay(opts: RelayMtaOptions): Promise<RelayMta> {
  const why = postfixUnavailable();
  if (why) throw new Error(`postfix relay: ${why}`);
  const host = opts.host ?? '127.0.0.1';
  const port = await findFreePort(host);
  const dir = await mkdtemp(join(tmpdir(), 'lm-postfix-'));
  await chmod(dir, 0o755); // the daemons run as postfix
  const name = `postfix-${port}.relay.test`;
  const conf = join(dir, 'etc');
  const queue = join(dir, 'queue');
  const data = join(dir, 'data');
  mkdirSync(conf);
  mkdirSync(queue);
  mkdirSync(data);
  await chown(data, uid('postfix'), gid('postfix'));
  const t = opts.replyTimeoutSec ?? 3;
  const bounceDomain = opts.bounceDomain ?? 'bounces.lettermill.test';
  const main = [
    'compatibility_level = 3.6',
    `queue_directory = ${queue}`,
    `data_directory = ${data}`,
    'command_directory = /usr/sbin',
    'daemon_directory = /usr/lib/postfix/sbin',
    'meta_directory = /etc/postfix',
    'shlib_directory = /usr/lib/postfix',
    'mail_owner = postfix',
    'setgid_group = postdrop',
    `maillog_file = ${dir}/maillog`,
    `maillog_file_prefixes = ${dir}`,
    `myhostname = ${name}`,
    'mydomain = relay.test',
    'myorigin = $myhostname',
    'mydestination =',
    'local_recipient_maps =',
    'alias_maps =',
    'alias_database =',
    'inet_interfaces = loopback-only',
    'inet_protocols = ipv4',
    'mynetworks = 127.0.0.0/8',
    'smtpd_relay_restrictions = permit_mynetworks, reject',
    'smtp_dns_support_level = disabled',
    'smtp_host_lookup = native',
    `relayhost = [${opts.relayTo.host}]:${opts.relayTo.port}`,
    `transport_maps = inline:{${bounceDomain}=smtp:[${opts.bouncesTo.host}]:${opts.bouncesTo.port}}`,
    // One attempt: a 4xx or a timeout bounces at once.
    'maximal_queue_lifetime = 0',
    'bounce_queue_lifetime = 0',
    'delay_warning_time = 0',
    'queue_run_delay = 1s',
    'minimal_backoff_time = 1s',
    'maximal_backoff_time = 1s',
    `smtp_connect_timeout = ${t}s`,
    `smtp_helo_timeout = ${t}s`,
    `smtp_mail_timeout = ${t}s`,
    `smtp_rcpt_timeout = ${t}s`,
    `smtp_data_init_timeout = ${t}s`,
    `smtp_data_xfer_timeout = ${t}s`,
    `smtp_data_done_timeout = ${t}s`,
    'smtp_tls_security_level = none',
    'smtpd_tls_security_level = none',
    'smtputf8_enable = no',
    'smtpd_peername_lookup = no',
    'biff = no',
    'notify_classes =',
  ].join('\n');
  await writeFile(join(conf, 'main.cf'), `${main}\n`);
  // Debian's master.cf, with its smtpd on our address and port instead of 25.
  // No chroot (the throwaway queue has no copy of /etc for it).
  const master = readFileSync('/etc/postfix/master.cf', 'utf8')
    .replace(/^smtp\s+inet\s.*$/m, `${host}:${port} inet n - n - - smtpd`)
    .replace(/^(\S+\s+\S+\s+\S+\s+\S+\s+)y(\s)/gm, '$1n$2');
  await writeFile(join(conf, 'master.cf'), master);
  const postfix = findBinary('postfix');
  await run(postfix, ['-c', conf, 'check']).catch(() => undefined); // creates the queue directories
  // master itself in the foreground (-d), not `postfix start-fg`: its process is ours to kill,
  // and setpriv's parent-death signal reaches it.
  const child = spawnDaemon('/usr/lib/postfix/sbin/master', ['-c', conf, '-d']);
  const out = tailLines(child.stdout, 500);
  const err = tailLines(child.stderr, 200);
  const log = () => `${out.text()}\n${err.text()}\n${existsSync(join(dir, 'maillog')) ? readFileSync(join(dir, 'maillog'), 'utf8').slice(-20_000) : ''}`;
  return supervise('postfix', { host, port, name, child, dir, log });
}

function uid(user: string): number {
  return Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim());
}
function gid(user: string): number {
  return Number(execFileSync('id', ['-g', user], { encoding: 'utf8' }).trim());
}


// ---------------------------------------------------------------------------------------
// Exim
// ---------------------------------------------------------------------------------------

/** Where the unpacked exim4-daemon-light lives (.ci/run fills it; the harness does too). */
export const EXIM_CACHE = process.env.LM_EXIM_DIR ?? '/var/lib/lettermill/exim';
const EXIM_BIN = join(EXIM_CACHE, 'usr/sbin/exim4');

/**
 * Why Exim cannot run here, or null. Gets the binary first when it is missing: the package
 * conflicts with postfix, so it is downloaded and unpacked (`apt-get download`, `dpkg -x`),
 * never installed; its library (libidn12) and its compiled-in user (Debian-exim) are added.
 */
export async function eximUnavailable(): Promise<string | null> {
  if (process.getuid?.() !== 0) return 'unpacking exim and running it with a private configuration needs root';
  try {
    if (!existsSync(EXIM_BIN)) {
      const tmp = await mkdtemp(join(tmpdir(), 'lm-exim-deb-'));
      await run('apt-get', ['download', 'exim4-daemon-light'], { cwd: tmp, timeoutMs: 120_000 });
      mkdirSync(EXIM_CACHE, { recursive: true });
      const deb = (await import('node:fs')).readdirSync(tmp).find((f) => f.endsWith('.deb'))!;
      await run('dpkg', ['-x', join(tmp, deb), EXIM_CACHE]);
      await rm(tmp, { recursive: true, force: true });
    }
    if (!/libidn\.so\.12 => \//.test(execFileSync('ldd', [EXIM_BIN], { encoding: 'utf8' }))) {
      await run('apt-get', ['install', '-y', '-qq', 'libidn12'], { timeoutMs: 180_000 });
    }
    try {
      execFileSync('id', ['Debian-exim'], { stdio: 'ignore' });
    } catch {
      await run('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', 'Debian-exim']);
    }
    return null;
  } catch (err) {
    return `exim4-daemon-light could not be obtained: ${(err as Error).message.split('\n')[0]}`;
  }
}

export async function startEximRelay(opts: RelayMtaOptions): Promise<RelayMta> {
  const why = await eximUnavailable();
  if (why) throw new Error(`exim relay: ${why}`);
  const host = opts.host ?? '127.0.0.1';
  const port = await findFreePort(host);
  const dir = await mkdtemp(join(tmpdir(), 'lm-exim-'));
  await chmod(dir, 0o755);
  const spool = join(dir, 'spool');
  const logs = join(dir, 'log');
  mkdirSync(spool);
  mkdirSync(logs);
  await chown(spool, uid('Debian-exim'), gid('Debian-exim'));
  await chown(logs, uid('Debian-exim'), gid('Debian-exim'));
  const name = `exim-${port}.relay.test`;
  const t = opts.replyTimeoutSec ?? 3;
  const bounceDomain = opts.bounceDomain ?? 'bounces.lettermill.test';
  const conf = [
    `primary_hostname = ${name}`,
    // Exim re-executes itself for deliveries; not from its compiled-in /usr/sbin/exim4.
    `exim_path = ${EXIM_BIN}`,
    `spool_directory = ${spool}`,
    `log_file_path = ${logs}/%slog`,
    `pid_file_path = ${dir}/exim.pid`,
    'exim_user = Debian-exim',
    'exim_group = Debian-exim',
    'never_users =',
    `local_interfaces = <; ${host}.${port}`,
    'domainlist local_domains =',
    'hostlist relay_from_hosts = 127.0.0.0/8',
    'acl_smtp_rcpt = acl_rcpt',
    'host_lookup =',
    'rfc1413_hosts =',
    'tls_advertise_hosts =',
    // No retry rules below: a temporary failure is final at once, and bounces.
    'delay_warning =',
    'ignore_bounce_errors_after = 0s',
    'timeout_frozen_after = 1m',
    'queue_only = false',
    '',
    'begin acl',
    'acl_rcpt:',
    '  accept hosts = +relay_from_hosts',
    '  deny',
    '',
    'begin routers',
    'to_bounce_server:',
    '  driver = manualroute',
    `  domains = ${bounceDomain}`,
    `  route_list = * ${opts.bouncesTo.host}`,
    '  transport = bounce_smtp',
    '  self = send',
    'to_sink:',
    '  driver = manualroute',
    `  route_list = * ${opts.relayTo.host}`,
    '  transport = sink_smtp',
    '  self = send',
    '',
    'begin transports',
    'sink_smtp:',
    '  driver = smtp',
    `  port = ${opts.relayTo.port}`,
    '  allow_localhost',
    `  connect_timeout = ${t}s`,
    `  command_timeout = ${t}s`,
    `  data_timeout = ${t}s`,
    `  final_timeout = ${t}s`,
    '  hosts_try_chunking =',
    'bounce_smtp:',
    '  driver = smtp',
    `  port = ${opts.bouncesTo.port}`,
    '  allow_localhost',
    '',
    'begin retry',
    '',
    'begin rewrite',
    '',
  ].join('\n');
  const file = join(dir, 'exim.conf');
  await writeFile(file, conf);
  // -bdf: daemon in the foreground; -odi: deliver at once.
  const child = spawnDaemon(EXIM_BIN, ['-C', file, '-bdf', '-odi']);
  const out = tailLines(child.stdout, 200);
  const err = tailLines(child.stderr, 200);
  const readLog = (n: string) => (existsSync(join(logs, n)) ? readFileSync(join(logs, n), 'utf8').slice(-20_000) : '');
  const log = () => `${out.text()}\n${err.text()}\n${readLog('mainlog')}\n${readLog('rejectlog')}\n${readLog('paniclog')}`;
  return supervise('exim', { host, port, name, child, dir, log });
}
