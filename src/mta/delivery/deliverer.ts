/**
 * The delivery engine: for each job that passed the pipeline, build the message, sign it
 * with DKIM, resolve the recipient's MX hosts and hand it over on a pooled SMTP connection
 * bound to the route's IP, then classify what the remote said. It never throws: every
 * outcome is a DeliveryResult the pipeline applies.
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { Counter, register as defaultRegistry, type Registry } from 'prom-client';
import type { Clock } from '../../shared/clock.js';
import type { Coordination } from '../../shared/coord/types.js';
import type { Db } from '../../shared/db/pool.js';
import type { Logger } from '../../shared/log.js';
import { classifyReply, parseReply, reasonFor } from './classify.js';
import { DkimKeyCache, type KeySource } from './dkim/keys.js';
import { dkimSign } from './dkim/sign.js';
import { CFBL_OUTCOMES, cfblHeaders, cfblOutcome } from './cfbl.js';
import { buildMessage, buildRawMessage, isSealedRaw, MessageBuildError, requireMailbox, stableMessageId } from './mime.js';
import { MxResolver, type MxHost } from './mx.js';
import { ConnectionPool, PoolBusyError, PoolClosedError, type PoolSettings } from './pool.js';
import { ProvenanceStore } from './provenance.js';
import { DELIVERY } from './settings.js';
import { SmtpError, SmtpSession, toFailure, type SmtpFailure, type TlsPolicy } from './smtp.js';
import { mxMatches, type StsLookup, type StsResolver } from '../tls/sts.js';
import type { TlsResult, TlsRptRecorder } from '../tls/tlsrpt.js';
import type { Deliverer, DeliveryResult, DeliveryRoute, OutboundMessage } from './types.js';
import { verpAddress } from './verp.js';

export interface ConnectionFailureInfo {
  domain: string;
  /** The MX hosts tried, each with what went wrong. */
  attempts: { mxHost: string; error: string }[];
  bindIp: string;
}

export interface DelivererOptions {
  clock: Clock;
  coord: Coordination;
  db: Db;
  log: Logger;
  /** DKIM keys (PgDkimKeyStore satisfies it). */
  keys: KeySource;
  /** BOUNCE_VERP_KEY and BOUNCE_HOST. */
  verpKey: string;
  bounceHost: string;
  /** A sending domain's registered return-path host (its VERP and CFBL addresses); BOUNCE_HOST otherwise. */
  returnPathHost?: (domain: string) => string | undefined;
  /** DNS_SERVERS. */
  dnsServers?: readonly string[];
  /** MTA_DELIVERY_PORT (default 25). */
  port?: number;
  /** SMTP_POOL_GLOBAL_MAX_PER_HOST (default 10). */
  globalMaxPerHost?: number;
  /**
   * Called when every MX host of a domain failed to connect (the degradation tracker that the
   * domain_backoff phase reads). Errors thrown here are logged and ignored.
   */
  onConnectionFailure?: (info: ConnectionFailureInfo) => void | Promise<void>;
  /** prom-client registry for mta_smtp_pool_connections and friends (default: the global one). */
  registry?: Registry;
  /** CAs used to judge remote certificates instead of the system's (tests). */
  tls?: Omit<TlsPolicy, 'require'>;
  /** MTA-STS policies (RFC 8461); absent: opportunistic TLS everywhere. */
  sts?: StsResolver;
  /** TLS-RPT result counts (RFC 8460); absent: nothing recorded. */
  tlsrpt?: TlsRptRecorder;
  /** Names this process's fleet-wide connection permits (default: random). */
  instanceId?: string;
  pool?: Partial<PoolSettings> & { autoSweep?: boolean };
  /** Provenance pruning timer (default true). */
  autoPrune?: boolean;
}

export interface DeliveryEngine extends Deliverer {
  readonly pool: ConnectionPool;
  readonly resolver: MxResolver;
  readonly keyCache: DkimKeyCache;
  readonly provenance: ProvenanceStore;
}

// Connection-level failures that say nothing about the message: try the next address/host.
const HOST_FAILURE_CODES = new Set(['ECONNECTION', 'ETIMEDOUT', 'ESOCKET', 'ETLS', 'EDNS', 'EPROTOCOL']);

function metric<T>(registry: Registry, name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

function describe(f: SmtpFailure): string {
  return f.response ? f.response : `${f.code}: ${f.message}`;
}

export function createDeliverer(o: DelivererOptions): DeliveryEngine {
  if (!o.verpKey) throw new Error('BOUNCE_VERP_KEY is required to sign VERP return paths');
  if (!o.bounceHost) throw new Error('BOUNCE_HOST is required for VERP return paths');
  const registry = o.registry ?? defaultRegistry;
  const port = o.port ?? 25;
  const instanceId = o.instanceId ?? randomBytes(6).toString('base64url');
  const log = o.log.child({ component: 'delivery' });
  const resolver = new MxResolver({ servers: o.dnsServers, clock: o.clock });
  const keyCache = new DkimKeyCache(o.keys, o.clock);
  const provenance = new ProvenanceStore(o.db, o.clock);
  const pool = new ConnectionPool({
    coord: o.coord,
    clock: o.clock,
    log,
    globalMaxPerHost: o.globalMaxPerHost ?? 10,
    instanceId,
    registry,
    settings: o.pool,
    autoSweep: o.pool?.autoSweep,
  });
  const tlsFallbacks = metric(
    registry,
    'mta_smtp_tls_fallback_total',
    () => new Counter({ name: 'mta_smtp_tls_fallback_total', help: 'STARTTLS handshakes that failed and were retried in plain text', registers: [registry] }),
  );
  const results = metric(
    registry,
    'mta_delivery_results_total',
    () => new Counter({ name: 'mta_delivery_results_total', help: 'Delivery attempts by result', labelNames: ['status', 'reason'], registers: [registry] }),
  );
  const cfblEmissions = metric(
    registry,
    'mta_cfbl_emissions_total',
    () => {
      const c = new Counter({ name: 'mta_cfbl_emissions_total', help: 'Sends by whether CFBL headers were emitted (RFC 9477), and why not', labelNames: ['outcome'], registers: [registry] });
      for (const outcome of CFBL_OUTCOMES) c.inc({ outcome }, 0);
      return c;
    },
  );
  const pruneTimer =
    o.autoPrune === false
      ? undefined
      : setInterval(() => {
          provenance.prune().catch((err) => log.warn({ err }, 'provenance prune failed'));
        }, DELIVERY.provenancePruneIntervalMs);
  pruneTimer?.unref();

  let closing = false;
  let inflight = 0;
  let idle: (() => void) | undefined;

  const local = (response: string, reason: string): DeliveryResult => ({ status: 'deferred', response, connectionFailure: false, local: true, reason });

  /**
   * The MX hosts to try under the domain's MTA-STS policy, whether TLS is required, and the
   * TLS-RPT recorder bound to the policy. `enforce` keeps only hosts matching the policy's
   * `mx` patterns; `testing` tries every host and reports the ones that do not match.
   */
  function stsRouting(domain: string, all: MxHost[], sts: StsLookup, bindIp: string) {
    const p = sts.policy && sts.policy.mode !== 'none' ? sts.policy : null;
    const sendingIp = bindIp === '0.0.0.0' || bindIp === '::' ? '' : bindIp;
    const report = (r: Omit<TlsResult, 'policyDomain' | 'policyType' | 'policyId' | 'sendingIp'>) => {
      if (!o.tlsrpt) return;
      void o.tlsrpt.record({ policyDomain: domain, policyType: p ? 'sts' : 'no-policy-found', policyId: p?.id ?? '', sendingIp, ...r });
    };
    // The policy could not be fetched (and none is known): reported once per attempt.
    if (sts.failure && o.tlsrpt) void o.tlsrpt.record({ policyDomain: domain, policyType: 'sts', result: sts.failure.type, detail: sts.failure.detail, sendingIp });
    if (!p) return { hosts: all, enforce: false, report };
    const hosts = all.filter((h) => mxMatches(h.name, p.mx));
    for (const h of all) {
      if (hosts.includes(h)) continue;
      report({ result: 'validation-failure', detail: 'MX host not listed in the MTA-STS policy', mxHost: h.name });
      log.warn({ domain, mxHost: h.name, mode: p.mode }, 'MX host does not match the MTA-STS policy');
    }
    return p.mode === 'enforce' ? { hosts, enforce: true, report } : { hosts: all, enforce: false, report };
  }

  async function attempt(msg: OutboundMessage, route: DeliveryRoute): Promise<DeliveryResult> {
    let to;
    let fromDomain: string;
    try {
      to = requireMailbox(msg.to, 'to');
      fromDomain = requireMailbox(msg.from, 'from').domain;
    } catch (err) {
      if (err instanceof MessageBuildError) return { status: 'bounced', hard: false, reason: 'syntaxerror', response: err.message };
      throw err;
    }
    const domain = to.domain;
    const dkimDomain = msg.dkimDomain.toLowerCase();

    const keys = await keyCache.get(dkimDomain).catch((err: Error) => err);
    if (keys instanceof Error) return local(`DKIM keys for ${dkimDomain} could not be read: ${keys.message}`, 'mailererror');
    if (keys.length === 0) return local(`no DKIM key for ${dkimDomain}: every message must be signed`, 'mailererror');

    const mx = await resolver.route(domain);
    if (mx.kind === 'nullmx') {
      return { status: 'bounced', hard: true, code: 556, enhancedCode: '5.1.10', reason: 'notaccept', response: `${domain} publishes a null MX (RFC 7505): it accepts no mail` };
    }
    if (mx.kind === 'nxdomain') {
      return { status: 'bounced', hard: true, code: 550, enhancedCode: '5.1.2', reason: 'hostunknown', response: `${domain} has no MX and no address records` };
    }
    if (mx.kind === 'tempfail') return local(`DNS lookup for ${domain} failed: ${mx.error}`, 'networkerror');

    const sts: StsLookup = o.sts ? await o.sts.lookup(domain) : { policy: null, source: 'none' };
    const { hosts, enforce, report } = stsRouting(domain, mx.hosts, sts, route.bindIp);
    if (hosts.length === 0) {
      return { status: 'deferred', response: `MTA-STS policy of ${domain} (enforce) lists none of its MX hosts (${mx.hosts.map((h) => h.name).join(', ')})`, connectionFailure: false, reason: 'securityerror' };
    }

    const now = o.clock.now();
    // Latency is throughput here (queue groups send one message at a time), so the provenance
    // write and the DKIM signature run while a connection is being found; the provenance row
    // is still durable before the message leaves (awaited right before sending).
    const recorded = provenance
      .record({ sendId: msg.sendId, messageId: msg.messageId, organizationId: msg.organizationId, campaignId: msg.campaignId ?? null, recipient: to.address.toLowerCase(), domain, ip: route.bindIp || null, sentAt: now, breakerEpoch: msg.breakerEpoch ?? null })
      .then(
        () => null,
        (err: Error) => err,
      );

    const returnHost = o.returnPathHost?.(dkimDomain) ?? o.bounceHost;
    const envelopeFrom = verpAddress(msg.sendId, o.verpKey, returnHost);
    const cfbl = cfblOutcome({ fromDomain, host: returnHost, key: o.verpKey, signed: keys.length > 0, sealedRaw: msg.raw !== undefined && isSealedRaw(msg.raw) });
    const ownHeaders = cfbl === 'emitted' ? cfblHeaders(msg.sendId, o.verpKey, returnHost) : undefined;
    let cfblCounted = false;
    const messageIdHeader = stableMessageId(msg.organizationId, msg.messageId, dkimDomain);
    const wildcard = route.bindIp === '0.0.0.0' || route.bindIp === '::' || route.bindIp === '';
    const families: (4 | 6)[] = wildcard ? [4, 6] : [isIP(route.bindIp) === 6 ? 6 : 4];
    const attempts: { mxHost: string; error: string }[] = [];
    // Signed messages per body encoding, shared by every host tried. The 8bit form is started
    // at once (nearly every server offers 8BITMIME); a server without it gets the encoded form.
    // `parts`: the DKIM-Signature fields and the message, written to the socket without joining.
    const built = new Map<boolean, Promise<{ parts: [string, string]; size: number; eightBit: boolean }>>();
    const build = (eightBit: boolean) => {
      let p = built.get(eightBit);
      if (!p) {
        p = (async () => {
          const b = msg.raw !== undefined ? buildRawMessage(msg, { messageIdHeader, date: now, ownHeaders }) : buildMessage(msg, { messageIdHeader, date: now, eightBit, ownHeaders });
          const sig = await dkimSign(b.wire, keys, Math.floor(now / 1000));
          return { parts: [sig, b.wire] as [string, string], size: sig.length + b.wire.length, eightBit: b.eightBit };
        })();
        // Handled where awaited; this keeps an unused speculative build from being "unhandled".
        p.catch(() => {});
        built.set(eightBit, p);
        // A body that needs no 8bit is the same either way.
        p.then((r) => {
          if (eightBit && !r.eightBit && !built.has(false)) built.set(false, p!);
        }, () => {});
      }
      return p;
    };
    void build(true);

    for (const host of hosts) {
      const addresses: string[] = [];
      let dnsError: string | undefined;
      for (const fam of families) {
        const r = await resolver.addresses(host.name, fam);
        if (r.kind === 'ok') addresses.push(...r.addresses);
        else if (r.kind === 'tempfail') dnsError = r.error;
      }
      if (addresses.length === 0) {
        attempts.push({ mxHost: host.name, error: dnsError ?? 'no usable address records' });
        continue;
      }
      const open = async (): Promise<SmtpSession> => {
        let last: unknown;
        for (const address of addresses) {
          try {
            const s = await SmtpSession.open(
              { mxHost: host.name, address, port, bindIp: wildcard ? '' : route.bindIp, ehloName: route.ehloName },
              { ...o.tls, require: enforce },
              () => o.clock.now(),
            );
            const problem = !s.tls ? { type: 'starttls-not-supported', detail: s.tlsFallback ? 'STARTTLS handshake failed' : 'STARTTLS not offered' } : s.tlsProblem;
            report({ result: problem?.type ?? 'success', detail: problem?.detail, mxHost: host.name, receivingIp: address });
            if (problem && sts.policy?.mode === 'testing') log.warn({ domain, mxHost: host.name, problem }, 'MTA-STS (testing): TLS would have failed under enforce');
            if (s.tlsFallback) {
              tlsFallbacks.inc();
              log.warn({ mxHost: host.name, address }, 'STARTTLS handshake failed; delivered over a plain-text retry');
            }
            return s;
          } catch (err) {
            if (err instanceof SmtpError && err.tlsResult) report({ result: err.tlsResult.type, detail: err.tlsResult.detail, mxHost: host.name, receivingIp: address });
            last = err;
          }
        }
        throw last;
      };
      const key = { mxHost: host.name, bindIp: route.bindIp, dkimDomain, tlsRequired: enforce };
      // A pooled connection may have died while idle: one retry on a fresh connection.
      for (let tries = 0; tries < 2; tries++) {
        let lease;
        try {
          lease = await pool.acquire(key, open, tries > 0);
        } catch (err) {
          if (err instanceof PoolClosedError) return local('delivery is shutting down', 'mailererror');
          if (err instanceof PoolBusyError) return local(err.message, 'toomanyconn');
          const f = toFailure(err);
          // A reply at greeting/EHLO (e.g. 421, 554) also means: try the next MX.
          attempts.push({ mxHost: host.name, error: describe(f) });
          break;
        }
        const { session } = lease;
        const reused = session.messages > 0;
        let reusable = false;
        try {
          const b = await build(session.extensions.includes('8BITMIME'));
          const provenanceError = await recorded;
          if (provenanceError) {
            reusable = true;
            return local(`provenance could not be written: ${provenanceError.message}`, 'mailererror');
          }
          if (!cfblCounted) {
            cfblCounted = true;
            cfblEmissions.inc({ outcome: cfbl });
          }
          const response = await session.send({ from: envelopeFrom, to: to.address, size: b.size, eightBit: b.eightBit }, b.parts, o.clock.now());
          reusable = true;
          const r = classifyReply(response, host.name, session.tls, 'DATA');
          return r.status === 'sent' && session.tlsFallback ? { ...r, tlsFallback: true } : r;
        } catch (err) {
          const f = toFailure(err);
          if (f.responseCode && f.responseCode >= 400) {
            // A reply to MAIL, RCPT or DATA: final for this attempt (no other MX, RFC 5321 §4.2.5).
            reusable = f.responseCode !== 421 && !session.closed;
            return classifyReply(f.response ?? `${f.responseCode} ${f.message}`, host.name, session.tls, f.command);
          }
          if (f.code === 'EMESSAGE' && /larger than allowed/i.test(f.message)) {
            reusable = true;
            return { status: 'bounced', hard: false, code: 552, enhancedCode: '5.3.4', reason: 'mesgtoobig', response: `${host.name}: ${f.message}`, mxHost: host.name };
          }
          if (reused && tries === 0 && HOST_FAILURE_CODES.has(f.code)) continue; // stale pooled connection
          attempts.push({ mxHost: host.name, error: describe(f) });
          break;
        } finally {
          pool.release(lease.lease, reusable);
        }
      }
    }

    // Every host failed before any reply to the message: a connection failure for the domain.
    try {
      await o.onConnectionFailure?.({ domain, attempts, bindIp: route.bindIp });
    } catch (err) {
      log.warn({ err, domain }, 'degradation tracker callback failed');
    }
    const lastError = attempts.at(-1)?.error ?? 'no MX host could be reached';
    const reply = /^[45]\d\d/.test(lastError) ? parseReply(lastError) : undefined;
    return {
      status: 'deferred',
      code: reply?.code,
      enhancedCode: reply?.enhancedCode,
      response: attempts.map((a) => `${a.mxHost}: ${a.error}`).join('; ') || lastError,
      mxHost: attempts.at(-1)?.mxHost,
      connectionFailure: true,
      reason: reply ? reasonFor(reply) : 'networkerror',
    };
  }

  return {
    pool,
    resolver,
    keyCache,
    provenance,
    async deliver(msg, route) {
      if (closing) return local('delivery is shutting down', 'mailererror');
      inflight++;
      let result: DeliveryResult;
      try {
        result = await attempt(msg, route);
      } catch (err) {
        log.error({ err, messageId: msg.messageId }, 'delivery attempt failed unexpectedly');
        result = local(`internal error: ${(err as Error).message}`, 'mailererror');
      } finally {
        inflight--;
        if (inflight === 0 && idle) idle();
      }
      results.inc({ status: result.status, reason: result.status === 'sent' ? 'delivered' : (result.reason ?? 'onhold') });
      return result;
    },
    async close() {
      closing = true;
      if (pruneTimer) clearInterval(pruneTimer);
      if (inflight > 0) await new Promise<void>((resolve) => (idle = resolve));
      await pool.close();
      await provenance.close();
      await o.tlsrpt?.drain();
    },
  };
}
