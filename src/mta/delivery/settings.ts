/**
 * Tunables of the delivery engine (mta.md → Delivery, Return-path addressing, Limits), in one
 * place so operators read and change them as data. Values pinned by the spec are marked.
 */
export const DELIVERY = {
  /** spec: 30 s connect and greeting timeout. */
  connectTimeoutMs: 30_000,
  greetingTimeoutMs: 30_000,
  /** spec: 60 s socket (inactivity) timeout. */
  socketTimeoutMs: 60_000,
  /** spec: at most 3 connections per `<mxHost>:<bindIp>:<dkimDomain>`. */
  maxConnectionsPerKey: 3,
  /** spec: idle timeout 30 s, maximum age 5 min, eviction sweep every 10 s. */
  idleTimeoutMs: 30_000,
  maxAgeMs: 5 * 60_000,
  sweepIntervalMs: 10_000,
  /** Global per-MX permits expire unless renewed by the sweep: a dead instance frees its share. */
  globalPermitTtlMs: 60_000,
  /** How long a send waits for a pooled connection (per-key or global cap) before deferring. */
  acquireTimeoutMs: 30_000,
  /** While waiting on the global cap, re-ask the coordination store this often. */
  globalCapRetryMs: 250,
  /** Messages sent over one connection before it is retired (reputation hygiene, like Postfix's reuse limit). */
  maxMessagesPerConnection: 1_000,
  /** Node's resolver does not expose MX TTLs: MX answers are kept this long (A/AAAA/TXT use their own TTLs, capped here too). */
  mxCacheMs: 300_000,
  maxDnsCacheMs: 3_600_000,
  /** Negative answers (NXDOMAIN, NODATA) and resolver failures. */
  negativeDnsCacheMs: 60_000,
  failedDnsCacheMs: 5_000,
  dnsTimeoutMs: 5_000,
  dnsTries: 2,
  /** spec: DKIM keys cached in memory for 5 minutes. */
  dkimKeyCacheMs: 5 * 60_000,
  /**
   * A domain without a key is remembered this briefly: the first sends after an operator adds
   * the key (on any instance of the fleet) find it on their next attempt instead of deferring
   * for 5 minutes. A lookup is one indexed query.
   */
  dkimMissingKeyCacheMs: 5_000,
  /** spec: provenance kept 16 days; pruned this often. */
  provenanceRetentionMs: 16 * 24 * 3_600_000,
  provenancePruneIntervalMs: 3_600_000,
  /** Provenance rows per INSERT (and ids per lookup) at most. */
  provenanceBatchMax: 500,
  /** Batched provenance lookups (bounce attribution) in flight at once. */
  provenanceLookupsInFlight: 2,
} as const;

/**
 * DKIM signed-header set, in signing order. `oversign` lists the name once more than it
 * occurs so a copy added in transit breaks the signature (RFC 6376 §8.15). Headers absent
 * from a message are not listed.
 */
export const DKIM_SIGNED_HEADERS: readonly { name: string; oversign: boolean }[] = [
  { name: 'from', oversign: true },
  { name: 'to', oversign: true },
  { name: 'subject', oversign: true },
  { name: 'date', oversign: false },
  { name: 'message-id', oversign: false },
  { name: 'reply-to', oversign: true },
  { name: 'mime-version', oversign: false },
  { name: 'content-type', oversign: false },
  { name: 'content-transfer-encoding', oversign: false },
  { name: 'list-unsubscribe', oversign: true },
  { name: 'list-unsubscribe-post', oversign: true },
  { name: 'list-id', oversign: false },
  { name: 'feedback-id', oversign: false },
  { name: 'cfbl-address', oversign: true },
  { name: 'cfbl-feedback-id', oversign: true },
];
