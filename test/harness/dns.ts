/**
 * A real authoritative DNS server (Knot DNS, `knotd`) on loopback for tests.
 *
 * Each instance runs its own knotd in the foreground as a child process with a generated
 * knot.conf and zone files in a private temp dir, on a free UDP+TCP port. Point the code
 * under test at `servers` (e.g. as a DNS_SERVERS entry or `Resolver#setServers([servers])`).
 *
 * This module also exports the small process/port helpers the other harness peers share.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { promises as dnsPromises } from 'node:dns';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

// ---------------------------------------------------------------------------------------
// Shared helpers (also used by smtp-sink-postfix.ts)
// ---------------------------------------------------------------------------------------

const binaryCache = new Map<string, string>();

/** Absolute path of a system binary, searching PATH plus the sbin dirs (not on PATH for non-root users). */
export function findBinary(name: string): string {
  const cached = binaryCache.get(name);
  if (cached) return cached;
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin'];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, fsConstants.X_OK);
      binaryCache.set(name, candidate);
      return candidate;
    } catch {
      // keep looking
    }
  }
  throw new Error(`test harness: required binary "${name}" not found (PATH, /usr/sbin, /sbin)`);
}

let setprivPath: string | null | undefined;

/** Path of util-linux `setpriv` (Linux), or null when unavailable. */
export function setprivBinary(): string | null {
  if (setprivPath === undefined) {
    try {
      setprivPath = process.platform === 'linux' ? findBinary('setpriv') : null;
    } catch {
      setprivPath = null;
    }
  }
  return setprivPath;
}

/**
 * Spawns a long-running helper process. On Linux it is wrapped in `setpriv --pdeathsig KILL`
 * (util-linux) so the kernel kills it if the test process dies without cleaning up;
 * `setpriv` execs the target, so `child.pid` is the daemon's own pid.
 * `runAsNobody` (root only, needs setpriv): start it as nobody:nogroup with only
 * CAP_NET_BIND_SERVICE. Use this instead of a daemon's own "-u user" switch, because a
 * uid change inside the daemon clears the parent-death signal.
 */
export function spawnDaemon(
  binary: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; runAsNobody?: boolean } = {},
): ChildProcess {
  const setpriv = setprivBinary();
  const drop =
    opts.runAsNobody && process.getuid?.() === 0
      ? ['--reuid=nobody', '--regid=nogroup', '--clear-groups', '--inh-caps=+net_bind_service', '--ambient-caps=+net_bind_service']
      : [];
  if (drop.length > 0 && !setpriv) throw new Error('test harness: runAsNobody needs setpriv (util-linux)');
  const [cmd, argv] = setpriv ? [setpriv, [...drop, '--pdeathsig', 'KILL', '--', binary, ...args]] : [binary, args];
  return spawn(cmd, argv, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Resolves when the child has exited (immediately if it already has). */
export function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. */
export async function killProcess(child: ChildProcess, graceMs = 3000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = waitForExit(child);
  child.kill('SIGCONT'); // in case it was paused
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Keeps the last `max` lines a stream produced, for error messages. */
export function tailLines(
  stream: NodeJS.ReadableStream | null,
  max = 200,
): { lines: string[]; text(): string; count(): number; since(count: number): string[] } {
  const lines: string[] = [];
  let total = 0;
  let partial = '';
  stream?.setEncoding('utf8');
  stream?.on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop() ?? '';
    for (const line of parts) {
      lines.push(line);
      total++;
      if (lines.length > max) lines.shift();
    }
  });
  return {
    lines,
    text: () => [...lines, partial].filter(Boolean).join('\n'),
    count: () => total,
    since: (count) => lines.slice(Math.max(0, lines.length - (total - count))),
  };
}

/** Promisified execFile that rejects with stdout/stderr in the message. */
export function run(
  binary: string,
  args: string[],
  opts: { timeoutMs?: number; cwd?: string } = {},
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { timeout: opts.timeoutMs ?? 30_000, cwd: opts.cwd, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`${binary} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`.trim()));
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

/**
 * A port that is currently free on `host` for TCP (and UDP too when `udp` is set).
 * There is an unavoidable window before the caller binds it, so callers must retry on
 * EADDRINUSE.
 */
export async function findFreePort(host: string, opts: { udp?: boolean } = {}): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const server = createServer();
    const port = await new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => {
        const addr = server.address();
        resolve(typeof addr === 'object' && addr ? addr.port : 0);
      });
    });
    let ok = port > 0;
    if (ok && opts.udp) {
      const udp = createSocket('udp4');
      ok = await new Promise<boolean>((resolve) => {
        udp.once('error', () => resolve(false));
        udp.bind(port, host, () => resolve(true));
      });
      await new Promise<void>((resolve) => {
        try {
          udp.close(() => resolve());
        } catch {
          resolve();
        }
      });
    }
    await new Promise<void>((resolve) => server.close(() => resolve()));
    if (ok) return port;
  }
  throw new Error(`test harness: no free port found on ${host}`);
}

/** Thrown from a `pollUntil` callback to stop polling at once (e.g. the daemon died). */
export class StopPolling extends Error {}

/** Polls `fn` until it returns a truthy value; throws after `timeoutMs` or on `StopPolling`. */
export async function pollUntil<T>(
  fn: () => Promise<T | undefined | false | null> | T | undefined | false | null,
  timeoutMs: number,
  describe: () => string,
  intervalMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (true) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      if (err instanceof StopPolling) throw err;
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`${describe()}${cause}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// ---------------------------------------------------------------------------------------
// DNS server
// ---------------------------------------------------------------------------------------

/**
 * A resolver address that never answers: a UDP socket (and TCP listener) on loopback that
 * reads queries and drops them, so clients time out (the "timeout" answer type).
 */
export async function startSilentResolver(host = '127.0.0.1'): Promise<{ servers: string; queries(): number; close(): Promise<void> }> {
  const port = await findFreePort(host, { udp: true });
  const udp = createSocket('udp4');
  let count = 0;
  udp.on('message', () => count++);
  await new Promise<void>((resolve, reject) => {
    udp.once('error', reject);
    udp.bind(port, host, () => resolve());
  });
  return {
    servers: `${host}:${port}`,
    queries: () => count,
    close: () => new Promise<void>((resolve) => udp.close(() => resolve())),
  };
}

export type DnsRecordType = 'A' | 'AAAA' | 'MX' | 'TXT' | 'CNAME' | 'PTR' | 'NS' | 'SRV' | 'TLSA' | 'CAA';

/**
 * One resource record.
 * - `name`: relative to the zone (`mx1`, `@` or `''` for the apex, `*.wild`), or absolute
 *   when it ends with a dot or with the zone name (`mx1.example.test`).
 * - `value`: presentation-format rdata. Domain names inside it (MX exchange, CNAME, PTR, NS
 *   target) are absolute whether or not they end with a dot, except a single label (`mx1`),
 *   which is relative to the zone. MX is `"10 mx1.example.test."`. TXT is the raw text
 *   (unquoted; split into 255-byte strings automatically). SRV/TLSA/CAA are written verbatim.
 */
export interface DnsRecord {
  name: string;
  type: DnsRecordType;
  value: string;
  ttl?: number;
}

export interface StartDnsServerOptions {
  /** Zone name (e.g. `example.test` or `2.0.0.127.in-addr.arpa`, trailing dot optional) → records. */
  zones: Record<string, DnsRecord[]>;
  /** Loopback listen address (default 127.0.0.1). */
  address?: string;
  /** Fixed port (default: a free one). */
  port?: number;
  /** TTL for records without one (default 60). */
  defaultTtl?: number;
  /** How long to wait for knotd to start answering (default 15 s). */
  startTimeoutMs?: number;
  /**
   * Zones knotd is configured for but cannot load (no zone file): every query in them is
   * answered SERVFAIL, as a broken upstream resolver would.
   */
  servfailZones?: string[];
}

export interface DnsServer {
  host: string;
  port: number;
  /** `host:port`, usable as a DNS_SERVERS entry or with `Resolver#setServers`. */
  servers: string;
  /**
   * Replaces a zone's records (adds the zone if it is new), reloads knotd with a higher
   * SOA serial and resolves once the new zone is being served.
   */
  setRecords(zone: string, records: DnsRecord[]): Promise<void>;
  /** Current records of a zone (a copy), undefined for an unknown zone. */
  getRecords(zone: string): DnsRecord[] | undefined;
  /**
   * Freezes knotd (SIGSTOP): queries get no answer, so resolvers time out — for DNS
   * temp-failure tests. `resume()` (SIGCONT) undoes it.
   */
  pause(): Promise<void>;
  resume(): void;
  /** knotd's recent log lines (for debugging failing tests). */
  log(): string;
  /** Stops knotd and removes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

interface ZoneState {
  fqdn: string; // 'example.test.'
  file: string;
  serial: number;
  records: DnsRecord[];
}

/** Lower-case, trailing-dot form of a zone or domain name. */
function fqdn(name: string): string {
  const n = name.trim().toLowerCase();
  if (n === '' || n === '.') return '.';
  return n.endsWith('.') ? n : `${n}.`;
}

/** Owner name in zone-file form for a record of `zone` ('example.test.'). */
function ownerName(name: string, zone: string): string {
  const n = name.trim();
  if (n === '' || n === '@') return '@';
  const lower = n.toLowerCase();
  const bare = zone.slice(0, -1);
  if (lower.endsWith('.') || lower === bare || lower.endsWith(`.${bare}`)) {
    const abs = fqdn(n);
    if (abs !== zone && !abs.endsWith(`.${zone}`)) {
      throw new Error(`DNS harness: record name "${name}" is outside zone "${zone}"`);
    }
    return abs;
  }
  return n;
}

/** Domain-name rdata: absolute unless it is a single relative label. */
function targetName(value: string): string {
  const v = value.trim();
  if (v === '.' || v === '@') return v;
  if (v.endsWith('.')) return v;
  return v.includes('.') ? `${v}.` : v;
}

/** TXT rdata as quoted character-strings of at most 255 bytes each. */
function txtRdata(value: string): string {
  const bytes = Buffer.from(value, 'utf8');
  const chunks: string[] = [];
  for (let off = 0; off < bytes.length || chunks.length === 0; off += 255) {
    const slice = bytes.subarray(off, off + 255);
    let out = '"';
    for (const b of slice) {
      if (b === 0x22) out += '\\"';
      else if (b === 0x5c) out += '\\\\';
      else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b);
      else out += `\\${b.toString().padStart(3, '0')}`;
    }
    chunks.push(`${out}"`);
    if (bytes.length === 0) break;
  }
  return chunks.join(' ');
}

function rdata(record: DnsRecord): string {
  const v = record.value.trim();
  switch (record.type) {
    case 'A':
    case 'AAAA':
    case 'SRV':
    case 'TLSA':
    case 'CAA':
      return v;
    case 'TXT':
      return txtRdata(record.value);
    case 'MX': {
      const m = /^(\d+)\s+(\S+)$/.exec(v);
      if (!m) throw new Error(`DNS harness: MX value must be "<preference> <host>", got "${record.value}"`);
      return `${m[1]} ${targetName(m[2])}`;
    }
    case 'CNAME':
    case 'PTR':
    case 'NS':
      return targetName(v);
    default:
      throw new Error(`DNS harness: unsupported record type ${String((record as DnsRecord).type)}`);
  }
}

function renderZone(zone: ZoneState, defaultTtl: number): string {
  const lines = [
    `$ORIGIN ${zone.fqdn}`,
    `$TTL ${defaultTtl}`,
    `@ ${defaultTtl} IN SOA ns.${zone.fqdn} hostmaster.${zone.fqdn} ${zone.serial} 3600 600 86400 ${defaultTtl}`,
  ];
  const hasApexNs = zone.records.some((r) => {
    const owner = r.type === 'NS' ? ownerName(r.name, zone.fqdn) : '';
    return owner === '@' || owner === zone.fqdn;
  });
  if (!hasApexNs) lines.push(`@ ${defaultTtl} IN NS ns.${zone.fqdn}`);
  for (const r of zone.records) {
    const ttl = r.ttl ?? defaultTtl;
    if (!Number.isInteger(ttl) || ttl < 0) throw new Error(`DNS harness: bad TTL ${ttl}`);
    lines.push(`${ownerName(r.name, zone.fqdn)} ${ttl} IN ${r.type} ${rdata(r)}`);
  }
  return `${lines.join('\n')}\n`;
}

function quoteConf(s: string): string {
  return JSON.stringify(s);
}

function renderConf(dir: string, host: string, port: number, zones: Iterable<ZoneState>, broken: readonly string[] = []): string {
  const lines = [
    'server:',
    `    rundir: ${quoteConf(dir)}`,
    // Stay the user we already are: knotd only switches users when told to, and as a
    // non-root user it just skips the capability setup (it needs none on a high port).
    ...(process.getuid?.() === 0 ? ['    user: root:root'] : []),
    `    pidfile: ${quoteConf(join(dir, 'knot.pid'))}`,
    `    listen: ${host}@${port}`,
    '    udp-workers: 1',
    '    tcp-workers: 2',
    '    background-workers: 1',
    '    identity: lettermill-test-dns',
    '    answer-rotation: off',
    'database:',
    `    storage: ${quoteConf(dir)}`,
    '    journal-db-max-size: 64M',
    '    timer-db-max-size: 16M',
    '    kasp-db-max-size: 16M',
    '    catalog-db-max-size: 16M',
    'control:',
    `    listen: ${quoteConf(join(dir, 'knot.sock'))}`,
    'log:',
    '  - target: stderr',
    '    any: info',
    'template:',
    '  - id: default',
    `    storage: ${quoteConf(dir)}`,
    '    semantic-checks: off',
    '    zonefile-sync: -1',
    '    zonefile-load: whole',
    '    journal-content: none',
    'zone:',
  ];
  let any = false;
  for (const z of zones) {
    any = true;
    lines.push(`  - domain: ${quoteConf(z.fqdn)}`, `    file: ${quoteConf(z.file)}`);
  }
  for (const [i, name] of broken.entries()) {
    any = true;
    lines.push(`  - domain: ${quoteConf(fqdn(name))}`, `    file: ${quoteConf(join(dir, `missing-${i}.zone`))}`);
  }
  if (!any) lines.pop();
  return `${lines.join('\n')}\n`;
}

/** Starts knotd serving `zones` on loopback and waits until every zone answers. */
export async function startDnsServer(opts: StartDnsServerOptions): Promise<DnsServer> {
  const host = opts.address ?? '127.0.0.1';
  const defaultTtl = opts.defaultTtl ?? 60;
  const startTimeoutMs = opts.startTimeoutMs ?? 15_000;
  const knotd = findBinary('knotd');
  const knotc = findBinary('knotc');
  const dir = await mkdtemp(join(tmpdir(), 'lm-knot-'));
  const confPath = join(dir, 'knot.conf');
  const sockPath = join(dir, 'knot.sock');
  const zones = new Map<string, ZoneState>();
  let zoneCounter = 0;

  const addZone = (name: string, records: DnsRecord[]): ZoneState => {
    const z: ZoneState = { fqdn: fqdn(name), file: join(dir, `zone-${zoneCounter++}.zone`), serial: 1, records: [...records] };
    if (z.fqdn === '.') throw new Error('DNS harness: the root zone is not supported');
    zones.set(z.fqdn, z);
    return z;
  };

  let child: ChildProcess | undefined;
  let stderr: ReturnType<typeof tailLines> | undefined;
  let port = 0;
  let stopped = false;

  const knotctl = (args: string[]) => run(knotc, ['-s', sockPath, '-t', '10', ...args], { timeoutMs: 15_000 });

  const resolverFor = () => {
    const r = new dnsPromises.Resolver({ timeout: 500, tries: 1 });
    r.setServers([`${host}:${port}`]);
    return r;
  };

  /**
   * Waits until the zone's SOA with `serial` is served. Fails fast when knotd exits or logs
   * that it could not load the zone (after log line `logMark`).
   */
  const waitForSerial = (z: ZoneState, timeoutMs: number, logMark: number) =>
    pollUntil(
      async () => {
        if (child && (child.exitCode !== null || child.signalCode !== null)) {
          throw new StopPolling(`DNS harness: knotd exited\n${stderr?.text() ?? ''}`);
        }
        const failed = (stderr?.since(logMark) ?? []).filter((l) => l.includes(`[${z.fqdn}]`) && /\b(error|critical):/.test(l));
        if (failed.length > 0) throw new StopPolling(`DNS harness: knotd could not load zone ${z.fqdn}:\n${failed.join('\n')}`);
        const soa = await resolverFor().resolveSoa(z.fqdn.slice(0, -1));
        return soa.serial === z.serial;
      },
      timeoutMs,
      () => `DNS harness: zone ${z.fqdn} serial ${z.serial} not served by knotd on ${host}:${port}\n${problems()}`,
    );

  /** knotd's recent warning/error lines. */
  const problems = () =>
    (stderr?.lines ?? []).filter((l) => /\b(warning|error|critical):/.test(l)).slice(-20).join('\n');

  const cleanup = async () => {
    if (child) await killProcess(child);
    await rm(dir, { recursive: true, force: true });
  };

  try {
    for (const [name, records] of Object.entries(opts.zones)) addZone(name, records);
    for (const z of zones.values()) await writeFile(z.file, renderZone(z, defaultTtl));

    for (let attempt = 0; ; attempt++) {
      port = opts.port ?? (await findFreePort(host, { udp: true }));
      await writeFile(confPath, renderConf(dir, host, port, zones.values(), opts.servfailZones));
      child = spawnDaemon(knotd, ['-c', confPath], { cwd: dir });
      stderr = tailLines(child.stderr);
      child.stdout?.resume();
      const proc = child;
      // `knotc status` only succeeds once knotd has bound its sockets and the control socket.
      try {
        await pollUntil(
          async () => {
            if (proc.exitCode !== null || proc.signalCode !== null) throw new StopPolling(`DNS harness: knotd exited on ${host}:${port}`);
            await knotctl(['status']);
            return true;
          },
          startTimeoutMs,
          () => `DNS harness: knotd did not start on ${host}:${port}`,
          50,
        );
      } catch (err) {
        await killProcess(proc);
        const log = stderr.text();
        if (opts.port === undefined && /address already in use/i.test(log) && attempt < 5) continue;
        throw new Error(`${(err as Error).message}\n${log}`);
      }
      break;
    }
    for (const z of zones.values()) await waitForSerial(z, startTimeoutMs, 0);
  } catch (err) {
    await cleanup();
    throw err;
  }

  let chain: Promise<unknown> = Promise.resolve();
  const serialize = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = chain.then(fn, fn);
    chain = next.catch(() => undefined);
    return next;
  };

  return {
    host,
    port,
    servers: `${host}:${port}`,
    setRecords(zoneName, records) {
      return serialize(async () => {
        if (stopped) throw new Error('DNS harness: server stopped');
        const logMark = stderr?.count() ?? 0;
        const key = fqdn(zoneName);
        const z = zones.get(key);
        if (z) {
          const next: ZoneState = { ...z, records: [...records], serial: z.serial + 1 };
          const text = renderZone(next, defaultTtl); // throws on invalid records before anything changes
          try {
            await writeFile(z.file, text);
            await knotctl(['-b', 'zone-reload', z.fqdn]);
          } catch (err) {
            // knotd keeps serving the previous version; put its file back too
            await writeFile(z.file, renderZone(z, defaultTtl)).catch(() => undefined);
            await new Promise((r) => setTimeout(r, 50)); // let knotd's log lines arrive
            throw new Error(`DNS harness: knotd rejected zone ${z.fqdn}: ${(err as Error).message}\n${problems()}`);
          }
          z.records = next.records;
          z.serial = next.serial;
          await waitForSerial(z, 10_000, logMark);
        } else {
          const text = renderZone({ fqdn: key, file: '', serial: 1, records }, defaultTtl);
          const added = addZone(key, records);
          try {
            await writeFile(added.file, text);
            await writeFile(confPath, renderConf(dir, host, port, zones.values(), opts.servfailZones));
            await knotctl(['-b', 'reload']);
            await waitForSerial(added, 10_000, logMark);
          } catch (err) {
            zones.delete(key);
            await writeFile(confPath, renderConf(dir, host, port, zones.values(), opts.servfailZones));
            await knotctl(['-b', 'reload']).catch(() => undefined);
            throw err;
          }
        }
      });
    },
    getRecords(zoneName) {
      const z = zones.get(fqdn(zoneName));
      return z ? z.records.map((r) => ({ ...r })) : undefined;
    },
    async pause() {
      if (stopped || !child?.pid) return;
      const pid = child.pid;
      child.kill('SIGSTOP');
      if (process.platform !== 'linux') return;
      // SIGSTOP is asynchronous: wait until every knotd thread is actually stopped
      await pollUntil(
        async () => {
          const tasks = await readdir(`/proc/${pid}/task`);
          const states = await Promise.all(
            tasks.map(async (t) => (await readFile(`/proc/${pid}/task/${t}/stat`, 'utf8')).replace(/^.*\) /s, '')[0]),
          );
          return states.every((st) => st === 'T' || st === 't');
        },
        5000,
        () => 'DNS harness: knotd did not stop',
        5,
      );
    },
    resume() {
      if (!stopped) child?.kill('SIGCONT');
    },
    log: () => stderr?.text() ?? '',
    async stop() {
      if (stopped) return;
      stopped = true;
      await chain;
      await cleanup();
    },
  };
}
