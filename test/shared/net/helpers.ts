/**
 * Test-side helpers for outbound-request tests (not mocks of our code):
 * - a TCP listener that only counts connections ("was anything connected?");
 * - a process-wide guard that refuses any socket connect outside loopback, so a bug can never
 *   send traffic off the machine (the house rule) and the attempt is recorded for the test;
 * - timers driven by a ManualClock.
 */
import net from 'node:net';
import type { ManualClock } from '../../../src/shared/clock.js';
import type { Timers } from '../../../src/shared/net/client.js';

export interface ConnectionCounter {
  host: string;
  port: number;
  readonly count: number;
  close(): Promise<void>;
}

export async function startConnectionCounter(host = '127.0.0.1', port = 0): Promise<ConnectionCounter> {
  let count = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    count++;
    sockets.add(s);
    s.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as net.AddressInfo;
  return {
    host,
    port: addr.port,
    get count() {
      return count;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

const LOOPBACK_V4 = /^127\./;

/** Refuses (and records) every connect to a non-loopback address made by this process. */
export function installLoopbackGuard(): { violations: string[]; uninstall(): void } {
  const violations: string[] = [];
  const original = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function (this: net.Socket, ...args: any[]) {
    // net.createConnection passes its normalized [options, callback] array as the first argument.
    const first = Array.isArray(args[0]) ? args[0][0] : args[0];
    const opts = typeof first === 'object' && first !== null ? first : { port: first, host: args[1] };
    const host: string | undefined = opts.host;
    if (!opts.path && host !== undefined && !LOOPBACK_V4.test(host) && host !== '::1' && host !== 'localhost') {
      violations.push(`${host}:${opts.port}`);
      process.nextTick(() => this.destroy(new Error(`test guard: connect to ${host} refused (loopback only)`)));
      return this;
    }
    return (original as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof original;
  return {
    violations,
    uninstall() {
      net.Socket.prototype.connect = original;
    },
  };
}

/** Timers that fire only when `advance` moves the ManualClock past their due time. */
export class ManualTimers implements Timers {
  private seq = 0;
  private readonly pending = new Map<number, { due: number; fn: () => void }>();
  constructor(readonly clock: ManualClock) {}
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.pending.set(id, { due: this.clock.now() + ms, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  /** Timers armed and not yet fired. */
  get armed(): number {
    return this.pending.size;
  }
  advance(ms: number): void {
    this.clock.advance(ms);
    const now = this.clock.now();
    for (const [id, t] of [...this.pending].sort((a, b) => a[1].due - b[1].due)) {
      if (t.due <= now) {
        this.pending.delete(id);
        t.fn();
      }
    }
  }
}
