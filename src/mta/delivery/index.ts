/**
 * The delivery engine's entry point for the MTA composition: a Deliverer built from the
 * role's services and configuration (BOUNCE_VERP_KEY, BOUNCE_HOST, DNS_SERVERS,
 * MTA_DELIVERY_PORT, SMTP_POOL_GLOBAL_MAX_PER_HOST).
 */
import type { Registry } from 'prom-client';
import type { Config } from '../../shared/config.js';
import type { Services } from '../../shared/services.js';
import { createDeliverer, type ConnectionFailureInfo, type DeliveryEngine } from './deliverer.js';
import type { KeySource } from './dkim/keys.js';
import { StsResolver } from '../tls/sts.js';
import type { TlsRptRecorder } from '../tls/tlsrpt.js';

export { createDeliverer, type DeliveryEngine, type DelivererOptions, type ConnectionFailureInfo } from './deliverer.js';
export type { KeySource, SigningKeyRecord } from './dkim/keys.js';
export { parseVerpAddress, verifyToken, signToken, verpAddress } from './verp.js';
export type { Deliverer, DeliveryResult, DeliveryRoute, OutboundMessage } from './types.js';

/**
 * Whether the composition connects the engine. Always outside tests; under NODE_ENV=test only
 * when DNS_SERVERS points the MTA at a test resolver, so no test can send mail resolved
 * through the machine's own resolvers (traffic must stay on loopback).
 */
export function deliveryEnabled(config: Pick<Config, 'NODE_ENV' | 'DNS_SERVERS'>): boolean {
  return config.NODE_ENV !== 'test' || (config.DNS_SERVERS?.length ?? 0) > 0;
}

export function createDeliveryEngine(
  s: Pick<Services, 'config' | 'log' | 'db' | 'coord' | 'clock'>,
  deps: {
    keys: KeySource;
    registry?: Registry;
    instanceId?: string;
    /** Used as the VERP host when BOUNCE_HOST is unset (the first sending IP's EHLO name). */
    bounceHostFallback?: string;
    onConnectionFailure?: (info: ConnectionFailureInfo) => void | Promise<void>;
    /** A sending domain's registered return-path host. */
    returnPathHost?: (domain: string) => string | undefined;
    /** TLS-RPT results (the MTA composition owns it: the report job reads what it writes). */
    tlsrpt?: TlsRptRecorder;
  },
): DeliveryEngine {
  const c = s.config;
  if (!c.BOUNCE_VERP_KEY) throw new Error('BOUNCE_VERP_KEY is required for delivery (VERP return paths are signed with it)');
  let bounceHost = c.BOUNCE_HOST;
  if (!bounceHost) {
    bounceHost = deps.bounceHostFallback ?? 'localhost';
    s.log.warn({ bounceHost }, 'BOUNCE_HOST is not set: VERP return paths use this host; bounces reach us only if it routes mail here');
  }
  return createDeliverer({
    clock: s.clock,
    coord: s.coord,
    db: s.db,
    log: s.log,
    keys: deps.keys,
    verpKey: c.BOUNCE_VERP_KEY,
    bounceHost,
    dnsServers: c.DNS_SERVERS,
    port: c.MTA_DELIVERY_PORT,
    globalMaxPerHost: c.SMTP_POOL_GLOBAL_MAX_PER_HOST,
    registry: deps.registry,
    instanceId: deps.instanceId,
    onConnectionFailure: deps.onConnectionFailure,
    returnPathHost: deps.returnPathHost,
    // MTA-STS policy hosts resolve through DNS_SERVERS and pass the private-address guard;
    // WEBHOOK_ALLOW_HOSTS is the one list of exempt hosts.
    sts: new StsResolver({ db: s.db, clock: s.clock, log: s.log, dnsServers: c.DNS_SERVERS, allowHosts: c.WEBHOOK_ALLOW_HOSTS }),
    tlsrpt: deps.tlsrpt,
  });
}
