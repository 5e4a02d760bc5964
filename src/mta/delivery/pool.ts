/**
 * SMTP connection pool keyed `<mxHost>:<bindIp>:<dkimDomain>` (mta.md → Delivery): at most
 * `maxConnectionsPerKey` per key, a fleet-wide cap per MX host held as permits of a
 * coordination-store semaphore, idle timeout, maximum age, and a sweep that never touches a
 * connection with a send in flight. Sessions are reused for many messages (RSET between).
 */
import { Gauge, register as defaultRegistry, type Registry } from 'prom-client';
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { Logger } from '../../shared/log.js';
import { DELIVERY } from './settings.js';
import type { SmtpSession } from './smtp.js';

export interface PoolKey {
  mxHost: string;
  bindIp: string;
  dkimDomain: string;
  /** MTA-STS enforce: only sessions whose TLS was required and validated share this key. */
  tlsRequired?: boolean;
}

export const poolKeyString = (k: PoolKey): string => `${k.mxHost}:${k.bindIp}:${k.dkimDomain}${k.tlsRequired ? ':sts' : ''}`;

/** The pool could not provide a connection in time (per-key or fleet-wide cap). */
export class PoolBusyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PoolBusyError';
  }
}

export class PoolClosedError extends Error {
  constructor() {
    super('delivery is shutting down');
    this.name = 'PoolClosedError';
  }
}

interface Pooled {
  id: number;
  session: SmtpSession;
  key: KeyState;
  busy: boolean;
  holder: string;
}

type Waiter = (conn: Pooled | null) => void;

interface KeyState {
  name: string;
  mxHost: string;
  conns: Set<Pooled>;
  idle: Pooled[];
  opening: number;
  /** Connections being closed: still open at the remote, so still counted against the caps. */
  closing: number;
  /** Connections whose post-send RSET is in flight: about to be free. */
  resetting: number;
  waiters: Waiter[];
}

export interface PoolSettings {
  maxConnectionsPerKey: number;
  idleTimeoutMs: number;
  maxAgeMs: number;
  sweepIntervalMs: number;
  globalPermitTtlMs: number;
  acquireTimeoutMs: number;
  globalCapRetryMs: number;
  maxMessagesPerConnection: number;
}

export interface PoolOptions {
  coord: Coordination;
  clock: Clock;
  log: Logger;
  /** Fleet-wide connections per MX host (SMTP_POOL_GLOBAL_MAX_PER_HOST). */
  globalMaxPerHost: number;
  /** Unique per process: names this instance's permits. */
  instanceId: string;
  registry?: Registry;
  settings?: Partial<PoolSettings>;
  /** Start the sweep timer (default true; tests drive sweep() with a ManualClock). */
  autoSweep?: boolean;
}

// One gauge per registry, summing every live pool that reports to it.
const gauges = new WeakMap<Registry, Set<ConnectionPool>>();

function registerGauge(registry: Registry, pool: ConnectionPool): () => void {
  let pools = gauges.get(registry);
  if (!pools) {
    const set = new Set<ConnectionPool>();
    pools = set;
    gauges.set(registry, set);
    if (!registry.getSingleMetric('mta_smtp_pool_connections')) {
      new Gauge({
        name: 'mta_smtp_pool_connections',
        help: 'Open outbound SMTP connections in the delivery pool, by state',
        labelNames: ['state'],
        registers: [registry],
        collect() {
          let busy = 0;
          let idle = 0;
          for (const p of set) {
            const s = p.stats();
            busy += s.busy;
            idle += s.idle;
          }
          this.set({ state: 'busy' }, busy);
          this.set({ state: 'idle' }, idle);
        },
      });
    }
  }
  pools.add(pool);
  const set = pools;
  return () => set.delete(pool);
}

export const globalPermitKey = (mxHost: string): string => `smtp:mx:${mxHost}`;
/** Set by an instance that was refused a permit: holders stop keeping idle connections to that host. */
const contendedKey = (mxHost: string): string => `smtp:mx-contended:${mxHost}`;

export class ConnectionPool {
  private readonly keys = new Map<string, KeyState>();
  private readonly byHost = new Map<string, Set<KeyState>>();
  private readonly s: PoolSettings;
  private readonly timer: NodeJS.Timeout | undefined;
  private readonly unregister: () => void;
  private nextId = 1;
  private pendingCloses = 0;
  private closing = false;
  private readonly contendedSignalled = new Map<string, number>();
  private drained: (() => void) | undefined;

  constructor(private readonly o: PoolOptions) {
    this.s = { ...DELIVERY, ...o.settings };
    this.unregister = registerGauge(o.registry ?? defaultRegistry, this);
    if (o.autoSweep !== false) {
      this.timer = setInterval(() => void this.sweep(), this.s.sweepIntervalMs);
      this.timer.unref();
    }
  }

  stats(): { busy: number; idle: number; keys: number } {
    let busy = 0;
    let idle = 0;
    for (const k of this.keys.values()) {
      for (const c of k.conns) {
        if (c.busy) busy++;
        else idle++;
      }
    }
    return { busy, idle, keys: this.keys.size };
  }

  /** Connections currently open for a key (tests, diagnostics). */
  count(key: PoolKey): number {
    return this.keys.get(poolKeyString(key))?.conns.size ?? 0;
  }

  /**
   * A connection for `key`, busy until release(): an idle one, a new one from `open` when both
   * caps allow, else the next one released (waiting at most acquireTimeoutMs).
   * `fresh` skips idle connections (a retry after a pooled one turned out dead).
   */
  async acquire(key: PoolKey, open: () => Promise<SmtpSession>, fresh = false): Promise<{ session: SmtpSession; lease: Pooled }> {
    if (this.closing) throw new PoolClosedError();
    const k = this.state(key);
    const deadline = Date.now() + this.s.acquireTimeoutMs;
    for (;;) {
      if (!fresh) {
        const idle = this.takeIdle(k);
        if (idle) return { session: idle.session, lease: idle };
        // One is finishing its RSET (well under a millisecond on a healthy link) and no other
        // send is waiting for it: reuse it rather than open another connection.
        if (k.resetting > k.waiters.length) {
          const got = await this.wait(k, deadline - Date.now());
          if (got) return { session: got.session, lease: got };
          if (this.closing) throw new PoolClosedError();
          if (Date.now() >= deadline) throw new PoolBusyError(`no SMTP connection to ${k.mxHost} within ${this.s.acquireTimeoutMs} ms`);
          continue;
        }
      }
      if (k.conns.size + k.opening + k.closing < this.s.maxConnectionsPerKey) {
        // The slot is reserved before any await, so concurrent sends cannot overshoot the cap.
        k.opening++;
        const holder = `${this.o.instanceId}:${this.nextId++}`;
        const permitKey = globalPermitKey(k.mxHost);
        let permit = false;
        try {
          permit = await this.o.coord.semaphoreAcquire(permitKey, holder, this.o.globalMaxPerHost, this.s.globalPermitTtlMs);
          if (!permit && this.evictIdleOfHost(k.mxHost, k)) {
            permit = await this.o.coord.semaphoreAcquire(permitKey, holder, this.o.globalMaxPerHost, this.s.globalPermitTtlMs);
          }
        } catch (err) {
          k.opening--;
          this.wakeOne(k);
          throw err;
        }
        if (permit) {
          let session: SmtpSession;
          try {
            if (this.closing) throw new PoolClosedError();
            session = await open();
          } catch (err) {
            k.opening--;
            await this.o.coord.semaphoreRelease(permitKey, holder).catch(() => {});
            this.wakeOne(k);
            throw err;
          }
          k.opening--;
          const c: Pooled = { id: this.nextId++, session, key: k, busy: true, holder };
          k.conns.add(c);
          return { session, lease: c };
        }
        k.opening--;
        // Fleet-wide cap reached: tell the holders (their sweeps close idle connections to this
        // host), then poll the store again soon or take a connection released here.
        this.signalContention(k.mxHost);
        const got = await this.wait(k, Math.min(this.s.globalCapRetryMs, deadline - Date.now()));
        if (got) return { session: got.session, lease: got };
      } else {
        const got = await this.wait(k, deadline - Date.now());
        if (got) return { session: got.session, lease: got };
      }
      if (this.closing) throw new PoolClosedError();
      if (Date.now() >= deadline) {
        throw new PoolBusyError(`no SMTP connection to ${k.mxHost} within ${this.s.acquireTimeoutMs} ms (per-key ${this.s.maxConnectionsPerKey}, fleet-wide ${this.o.globalMaxPerHost})`);
      }
    }
  }

  /**
   * Returns a connection after a send. Reusable ones get RSET (still counted as in flight
   * until it answers) and go to the next waiter or the idle list; anything else is closed.
   */
  release(lease: Pooled, reusable: boolean): void {
    const now = this.o.clock.now();
    const s = lease.session;
    if (
      !reusable ||
      s.closed ||
      this.closing ||
      now - s.createdAt >= this.s.maxAgeMs ||
      s.messages >= this.s.maxMessagesPerConnection
    ) {
      this.discard(lease, reusable && !s.closed);
      return;
    }
    const k = lease.key;
    k.resetting++;
    s.reset().then(
      () => {
        k.resetting--;
        s.lastUsed = this.o.clock.now();
        this.handBack(lease);
      },
      () => {
        k.resetting--;
        this.discard(lease, false);
      },
    );
  }

  /** Closes connections idle too long or past their maximum age; renews permits of the rest. */
  async sweep(): Promise<void> {
    const now = this.o.clock.now();
    // Idle connections to a host another send is waiting for give their permits back.
    for (const [host, ks] of this.byHost) {
      if (![...ks].some((k) => k.idle.length > 0)) continue;
      const contended = await this.o.coord.getJson<number>(contendedKey(host)).catch(() => null);
      if (!contended) continue;
      for (const k of ks) for (const c of k.idle.splice(0)) this.discard(c, true);
    }
    for (const k of this.keys.values()) {
      for (const c of [...k.conns]) {
        if (c.busy) continue; // never evict a connection with a send in flight
        const s = c.session;
        if (s.closed || now - s.lastUsed >= this.s.idleTimeoutMs || now - s.createdAt >= this.s.maxAgeMs) {
          k.idle = k.idle.filter((x) => x !== c);
          this.discard(c, !s.closed);
        }
      }
    }
    const renewals: Promise<unknown>[] = [];
    for (const k of this.keys.values()) {
      for (const c of k.conns) {
        renewals.push(this.o.coord.semaphoreAcquire(globalPermitKey(k.mxHost), c.holder, this.o.globalMaxPerHost, this.s.globalPermitTtlMs).catch(() => false));
      }
      if (k.conns.size === 0 && k.opening === 0 && k.closing === 0 && k.waiters.length === 0) this.dropKey(k);
    }
    await Promise.all(renewals);
  }

  /** Stops new acquisitions, waits for sends in flight, then QUITs every connection. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.timer) clearInterval(this.timer);
    for (const k of this.keys.values()) {
      for (const w of k.waiters.splice(0)) w(null);
      for (const c of k.idle.splice(0)) this.discard(c, true);
    }
    await this.until(() => this.stats().busy === 0);
    for (const k of this.keys.values()) for (const c of [...k.conns]) this.discard(c, true);
    // Connections QUIT in parallel; permits are released as each one goes.
    await this.until(() => this.pendingCloses === 0);
    this.unregister();
  }

  private state(key: PoolKey): KeyState {
    const name = poolKeyString(key);
    let k = this.keys.get(name);
    if (!k) {
      k = { name, mxHost: key.mxHost, conns: new Set(), idle: [], opening: 0, closing: 0, resetting: 0, waiters: [] };
      this.keys.set(name, k);
      let hs = this.byHost.get(key.mxHost);
      if (!hs) this.byHost.set(key.mxHost, (hs = new Set()));
      hs.add(k);
    }
    return k;
  }

  private dropKey(k: KeyState): void {
    this.keys.delete(k.name);
    const hs = this.byHost.get(k.mxHost);
    hs?.delete(k);
    if (hs && hs.size === 0) this.byHost.delete(k.mxHost);
  }

  private takeIdle(k: KeyState): Pooled | undefined {
    const now = this.o.clock.now();
    while (k.idle.length) {
      // Most recently used first: the others age out and the pool shrinks to what the load needs.
      const c = k.idle.pop()!;
      if (c.session.closed || now - c.session.createdAt >= this.s.maxAgeMs || now - c.session.lastUsed >= this.s.idleTimeoutMs) {
        this.discard(c, !c.session.closed);
        continue;
      }
      c.busy = true;
      return c;
    }
    return undefined;
  }

  /** Frees a fleet permit held by an idle connection of another key to the same host. */
  private evictIdleOfHost(mxHost: string, except: KeyState): boolean {
    for (const k of this.byHost.get(mxHost) ?? []) {
      if (k === except || k.idle.length === 0) continue;
      const c = k.idle.shift()!;
      this.discard(c, true);
      return true;
    }
    return false;
  }

  private handBack(c: Pooled): void {
    const k = c.key;
    const w = k.waiters.shift();
    if (w) {
      w(c); // stays busy: handed straight to the waiting send
      return;
    }
    // Sends of another key to the same host are waiting for a permit: free this one.
    for (const other of this.byHost.get(k.mxHost) ?? []) {
      if (other !== k && other.waiters.length > 0) {
        this.discard(c, true);
        return;
      }
    }
    c.busy = false;
    k.idle.push(c);
    this.checkDrained();
  }

  private discard(c: Pooled, graceful: boolean): void {
    const k = c.key;
    if (!k.conns.delete(c)) return;
    c.busy = false;
    k.closing++;
    this.pendingCloses++;
    // The permit is returned only once the TCP connection is gone, so the remote never sees
    // more connections than the caps allow, not even for a moment.
    void (graceful ? c.session.quit() : c.session.destroy())
      .then(() => this.o.coord.semaphoreRelease(globalPermitKey(k.mxHost), c.holder))
      .catch((err) => this.o.log.warn({ err, mxHost: k.mxHost }, 'could not release SMTP pool permit (it expires on its own)'))
      .finally(() => {
        k.closing--;
        this.pendingCloses--;
        // A permit of this host came free: one waiter of each key to it may try again.
        for (const other of this.byHost.get(k.mxHost) ?? [k]) this.wakeOne(other);
        this.checkDrained();
      });
    this.checkDrained();
  }

  private signalContention(mxHost: string): void {
    const now = Date.now();
    if ((this.contendedSignalled.get(mxHost) ?? 0) > now - 1_000) return;
    this.contendedSignalled.set(mxHost, now);
    if (this.contendedSignalled.size > 10_000) this.contendedSignalled.clear();
    void this.o.coord.setJson(contendedKey(mxHost), 1, 2 * this.s.sweepIntervalMs).catch(() => {});
  }

  /** Capacity changed: let one waiter try again. */
  private wakeOne(k: KeyState): void {
    const w = k.waiters.shift();
    if (w) w(null);
  }

  private wait(k: KeyState, ms: number): Promise<Pooled | null> {
    if (ms <= 0) return Promise.resolve(null);
    return new Promise((resolve) => {
      const waiter: Waiter = (c) => {
        clearTimeout(timer);
        resolve(c);
      };
      const timer = setTimeout(() => {
        const i = k.waiters.indexOf(waiter);
        if (i >= 0) k.waiters.splice(i, 1);
        resolve(null);
      }, ms);
      k.waiters.push(waiter);
    });
  }

  private checkDrained(): void {
    if (this.drained) this.drained();
  }

  /** Resolves once `predicate` holds, re-checked whenever a connection changes state. */
  private until(predicate: () => boolean): Promise<void> {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve) => {
      this.drained = () => {
        if (!predicate()) return;
        this.drained = undefined;
        resolve();
      };
    });
  }
}
