/**
 * Tunables of transport security (mta.md → Delivery: MTA-STS, TLS-RPT, DKIM rotation), in one
 * place so operators read and change them as data. Values pinned by the spec are marked.
 */
export const TRANSPORT = {
  /** spec: a policy is cached at least 5 minutes (its TXT id is not re-read before). */
  stsMinCacheMs: 5 * 60_000,
  /** Each instance re-reads a cached policy row at most this often (the fleet's table stays the truth). */
  stsMemoMs: 30_000,
  /** spec: no policy (or none could be fetched) is remembered 1 hour. */
  stsNegativeCacheMs: 3_600_000,
  /** RFC 8461 §3.3: policy bodies are small; 64 KiB is the RFC's suggested cap. */
  stsMaxBodyBytes: 64 * 1024,
  /** RFC 8461 §3.3 suggests about a minute; an MX that waits on this stalls one attempt only. */
  stsFetchTimeoutMs: 10_000,
  /** RFC 8461 §3.2: max_age is at most about one year (31557600 s). */
  stsMaxAgeLimitS: 31_557_600,
  /** TLS-RPT: failure-details rows per policy in one report (RFC 8460 leaves it to the sender). */
  tlsrptMaxFailureDetails: 100,
  /** TLS-RPT: rows kept this many days, then pruned by the report job. */
  tlsrptRetentionDays: 14,
  /** TLS-RPT report POST deadline. */
  tlsrptPostTimeoutMs: 30_000,
  /** TLS-RPT: the report job runs this often; it reports the UTC day before. */
  tlsrptJobIntervalMs: 24 * 3_600_000,
  /** DKIM rotation job: spec every 6 hours. */
  dkimRotationJobIntervalMs: 6 * 3_600_000,
  /** spec: a pending key is activated after 48 h of overlap. */
  dkimOverlapMs: 48 * 3_600_000,
  /** spec: keys older than 180 days get a rotation recommendation. */
  dkimRecommendRotationMs: 180 * 24 * 3_600_000,
} as const;
