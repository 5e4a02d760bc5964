/**
 * Tunable sending policy of the MTA: every number an operator may want to change lives here,
 * as data. Code reads it through `MtaPolicy` (tests and benchmarks pass their own copy).
 * Where mta.md fixes a value it is quoted; the rest are our choices, explained in docs/mta.md.
 */

export interface IspProfileValues {
  /** Sends per minute per (sending IP, provider) at start. */
  defaultRate: number;
  ceiling: number;
  floor: number;
  /** Rate multiplier on an SMTP 4xx (0 < f < 1). */
  backoffFactor: number;
  /** Rate multiplier after sustained success (> 1). */
  recoveryFactor: number;
}

export interface SeedIspProfile extends IspProfileValues {
  /** Profile key: the provider's main domain, or `default` for every other domain. */
  domain: string;
  /** Other recipient domains served by the same provider (share the profile and its throttle). */
  aliases: string[];
}

/** Key of the profile used for domains no other profile names. */
export const DEFAULT_PROFILE = 'default';

export interface EngagementBand {
  name: string;
  /** Inclusive lower bound of the score (0–100). */
  minScore: number;
  /** Queue ordering key; lower runs first. */
  priority: number;
}

export interface MtaPolicy {
  /** mta.md → Default ISP profiles. */
  ispProfiles: SeedIspProfile[];
  throttle: {
    /** Sliding window over which `rate` (per minute) is enforced. */
    windowMs: number;
    /** mta.md: no free slot defers 5 seconds. */
    noSlotDeferMs: number;
    /** Consecutive successful sends that count as "sustained success" (one recovery step). */
    recoverAfterSuccesses: number;
    /** Consecutive 4xx replies after which the (IP, provider) pair is blocked. */
    blockAfterFailures: number;
    /** How long a blocked pair stays blocked. */
    blockMs: number;
    /** Adaptive rate state is dropped after this long without traffic (back to defaultRate). */
    stateTtlMs: number;
  };
  /** mta.md → IP warming schedule: [day, cap]; the cap of the latest day <= today applies. */
  warming: {
    schedule: [day: number, cap: number][];
    /** From this day on the IP is unlimited (graduated). */
    graduateDay: number;
    /** mta.md: deferral to the next UTC day is bounded at one hour. */
    maxDeferMs: number;
    /** Not shown in mta.md: shortest deferral, so a job does not spin just before midnight. */
    minDeferMs: number;
  };
  breaker: {
    /** Ring buffer length (the slow window is the whole ring). */
    ringSize: number;
    windows: {
      name: 'fast' | 'slow';
      size: number;
      /** Markers needed before this window can trip. */
      minSample: number;
      /** Trips when the rate is strictly greater than these fractions. */
      maxBounceRate: number;
      maxComplaintRate: number;
    }[];
    cooldownMs: number;
    /** Cooldown after a failed half-open test. */
    reopenCooldownMs: number;
    halfOpenProbes: number;
    /** Deferral for sends beyond the probes while half-open results are pending. */
    halfOpenDeferMs: number;
    /**
     * After the clean probes closed the breaker, a bounce or complaint about one of them that
     * arrives within this long (a DSN, an ARF report) still reopens it.
     */
    probationMs: number;
  };
  orgLimits: {
    daily: number;
    hourly: number;
    dailyTtlMs: number;
    hourlyTtlMs: number;
  };
  smtpIntel: {
    /** Results counted per recipient domain over this window (in buckets of bucketMs). */
    windowMs: number;
    bucketMs: number;
    /** Results needed in the window before a verdict is given. */
    minSample: number;
    /** Share of policy/reputation 5xx replies that marks a domain as blocking. */
    blockingRate: number;
    blockingDeferMs: number;
    /** Share of 4xx replies that marks a domain as degraded. */
    degradedRate: number;
    degradedDeferMs: number;
  };
  domainBackoff: {
    /** Connection failures (every MX unreachable) in a row before backing off. */
    threshold: number;
    baseMs: number;
    maxMs: number;
    /** A failure streak older than this is forgotten. */
    streakTtlMs: number;
  };
  /** Sisimai reasons of 5xx replies that speak about the sender, not the recipient. */
  blockingReasons: string[];
  /** Used when neither a pool rule nor the job's ipPool names a configured pool. */
  defaultPool: string;
  /** select_ip: deferral when no address of the pool is eligible. */
  noEligibleIpDeferMs: number;
  /** mta.md → Engagement-based ordering. Ordered by minScore, highest first. */
  engagementBands: EngagementBand[];
  /** Queue priority of jobs without a usable score (the lowest band). */
  defaultPriority: number;
  /** mta.md: deferral delay gets ±15 % jitter. */
  deferJitter: number;
  /** Events whose emission is rate-limited per subject (e.g. per pool) to one per period. */
  eventRepeatMs: { all_ips_blocked: number };
  /**
   * The delivery queue's retries (mta.md → Queue). The spec's "max attempts 5" counts retries:
   * a job is tried once, then retried at most `retries` times, waiting `backoffMs[n-1]` before
   * retry n (the last entry repeats should `retries` outgrow the list), then fails. Every step
   * of the spec's list (30 s … 2 h) is used; the queue's own `maxAttempts` counts tries (6).
   */
  queue: {
    retries: number;
    backoffMs: number[];
  };
  /** Blocklist lookups, monitoring and the sending-address audit (src/mta/reputation/, docs/reputation.md). */
  reputation: {
    /** One DNS query's timeout. */
    queryTimeoutMs: number;
    /** mta.md: at most 3 attempts per lookup. */
    attempts: number;
    /** Wait before the 2nd attempt; each further one doubles it. */
    backoffBaseMs: number;
    /** Lookups of one sweep in flight at once. */
    concurrency: number;
    /** mta.md: a sweep every 15 minutes. */
    sweepEveryMs: number;
    /** The audit runs this often on the leader (and at first start). */
    auditEveryMs: number;
    /** POST /ip-audit/run serves an audit younger than this instead of probing again. */
    auditFreshMs: number;
    /** Egress probe: TCP/25 connect timeout per MX host. */
    probeTimeoutMs: number;
    /** MTA_FAILOVER_RELAY_URL: connect, greeting and socket timeout. */
    relayTimeoutMs: number;
    /** Neighbours of the /24 sampled by the audit (spread evenly over the range). */
    neighbourSample: number;
    /** Share of listed neighbours above which the /24 makes an address unusable. */
    neighbourListedShare: number;
    /** Removal assistant: a bounce or complaint rate above these (last 24 h) is named as the likely cause. */
    causeBounceRate: number;
    causeComplaintRate: number;
    /** Removal assistant: today's volume above this multiple of the daily average of the week is a spike. */
    causeSpikeFactor: number;
    /**
     * select_ip readiness: an address whose PTR a sweep confirmed missing, or whose PTR names do
     * not resolve back to it, leaves its pool until a sweep sees it fixed (a lookup that fails
     * changes nothing). Large mailbox providers refuse mail from such addresses (Gmail 5.7.25).
     */
    requirePtr: boolean;
    /** GET /ip-reputation/:ip: mark changes kept per address, and UTC days of sending shown. */
    historyEntries: number;
    historyDays: number;
  };
  /** Events to the backend through the outbox (src/mta/outbox/). */
  events: {
    /** Posts of one event before it is dead-lettered (each DLQ retry gives it this many again). */
    maxAttempts: number;
    /** Wait after the n-th failed post (the last value repeats). */
    backoffMs: number[];
    /** A relay posting a row owns it this long; after that (a crashed relay) another takes it. */
    leaseMs: number;
    /** How often a relay looks for due rows (retries, rows of a relay that died). */
    pollMs: number;
    postTimeoutMs: number;
    /** Posts in flight, and events and bytes per post (the backend takes 1 – 500). */
    posts: { maxInFlight: number; maxItems: number; maxBytes: number };
    /** Fresh rows kept in memory while the backend does not answer (the rest wait in the table). */
    held: { maxItems: number; maxBytes: number };
  };
  /** Delivery log rows older than this are pruned. */
  deliveryLogRetentionDays: number;
  /** Domains (and their subdomains) whose links screen a message out. Extended by CONTENT_URL_BLOCKLIST. */
  urlBlocklist: string[];
  /**
   * Content screening's DNS URI blocklist (CONTENT_URIBL, CONTENT_URIBL_ZONES; docs/mta.md):
   * its link domains asked as `<domain>.<zone>`. A failed lookup passes the message.
   */
  uribl: {
    /** One query's timeout, and the attempts (no retry: the message waits in phase 1). */
    queryTimeoutMs: number;
    attempts: number;
    backoffBaseMs: number;
    /** Names asked per message at most (a link's host and its parents count one each); the rest pass. */
    maxNames: number;
    /** How long a listed or clean answer is kept; an unknown one (the resolver failed) is kept less. */
    cacheTtlMs: number;
    unknownTtlMs: number;
    /** Answers kept at most (the oldest go first). */
    cacheMaxEntries: number;
  };
  inbound: {
    maxClients: number;
    maxConnectionsPerIp: number;
    maxRecipients: number;
    socketTimeoutMs: number;
    closeTimeoutMs: number;
    /** A message with more Received header fields than this is refused as a loop (554 5.4.6). */
    maxReceivedHeaders: number;
    /** Targets of one forward route at most. */
    maxForwardTargets: number;
  };
  feedback: { horizonMs: number };
  /** mta.md → Warming cap behaviour (adaptive day, provider multiplier, pacing, deferral-aware retry). */
  adaptiveWarming: AdaptiveWarmingPolicy;
  /** POST /scan/attachment and the screening of submitted attachments (docs/mta.md → Content protection). */
  scan: ScanPolicy;
  submission: {
    /** mta.md → Limits: 25 MB. */
    maxMessageBytes: number;
    /** mta.md → Limits: the intake receipt is kept four days. */
    receiptMs: number;
    /** Failed AUTH attempts from one address within `windowMs` before it is banned for `banMs`. */
    authFailures: { max: number; windowMs: number; banMs: number };
    /** Organization of mail submitted with the master key (an organization key names its own). */
    masterOrganizationId: string;
    /** Group commit of intake (src/shared/batch.ts): transactions in flight, submissions and bytes per transaction. */
    intakeBatch: { maxInFlight: number; maxItems: number; maxBytes: number };
    /** How often the leader deletes stored message bodies no pending or active job reads. */
    bodyPurgeEveryMs: number;
  };
}

export interface ScanPolicy {
  /** Largest file (and, for the route, largest upload body) accepted; checked before any work. */
  maxFileBytes: number;
  /** Extensions allowed when SCAN_ALLOWED_EXTENSIONS is not set. */
  allowedExtensions: string[];
  /** Extensions whose files always start with a signature file-type knows (no signature → mismatch). */
  signedExtensions: string[];
  /** Names that mean the same format. */
  equivalentExtensions: string[][];
  /** Formats whose container file-type may report instead (OOXML and JAR are zip files). */
  containerExtensions: Record<string, string[]>;
  /** Declared types that say nothing about the format. */
  genericTypes: string[];
  /** A double extension is one of these followed by an executable one. */
  decoyExtensions: string[];
  executableExtensions: string[];
  clamd: { timeoutMs: number; chunkBytes: number };
}

/** Rates are shares of the day's results (sent + bounced + deferred) at one IP or (IP, provider). */
export interface WarmingThresholds {
  /** Results needed before a day is judged (mta.md: fewer than 50 → `insufficient_data`). */
  minSample: number;
  /** At or below both: the IP's schedule advances `accelerateDays` instead of one. */
  accelerate: { maxBounceRate: number; maxDeferralRate: number };
  /** Above either: the IP's schedule moves `decelerateDays`; a provider's multiplier halves. */
  decelerate: { bounceRate: number; deferralRate: number };
}

export interface AdaptiveWarmingPolicy {
  thresholds: WarmingThresholds;
  accelerateDays: number;
  /** Days the schedule moves after a poor day (0: holds, negative: goes back). */
  decelerateDays: number;
  provider: { min: number; max: number; decreaseFactor: number; recoverStep: number; cleanDaysToRecover: number };
  /** Providers recognised by MX host suffix (recipient domains hosted by them); keys are ISP profile domains. */
  providerMx: { provider: string; mxSuffixes: string[] }[];
  pacing: {
    /** Pools whose traffic is bulk (paced); every other pool is transactional. */
    bulkPools: string[];
    startFraction: number;
    minBulkAvailable: number;
    /** Share of the day's cap kept for transactional traffic. */
    transactionalHeadroom: number;
  };
  pressure: { horizonMs: number; maxFactor: number; maxDelayMs: number; maxEvents: number };
}

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

export const DEFAULT_POLICY: MtaPolicy = {
  ispProfiles: [
    { domain: 'gmail.com', aliases: ['googlemail.com'], defaultRate: 100, ceiling: 300, floor: 5, backoffFactor: 0.75, recoveryFactor: 1.1 },
    { domain: 'outlook.com', aliases: ['hotmail.com', 'live.com'], defaultRate: 80, ceiling: 200, floor: 5, backoffFactor: 0.75, recoveryFactor: 1.1 },
    { domain: 'yahoo.com', aliases: ['aol.com', 'ymail.com'], defaultRate: 50, ceiling: 150, floor: 3, backoffFactor: 0.75, recoveryFactor: 1.1 },
    { domain: 'icloud.com', aliases: ['me.com', 'mac.com'], defaultRate: 60, ceiling: 150, floor: 5, backoffFactor: 0.75, recoveryFactor: 1.1 },
    { domain: DEFAULT_PROFILE, aliases: [], defaultRate: 30, ceiling: 100, floor: 2, backoffFactor: 0.75, recoveryFactor: 1.1 },
  ],
  throttle: {
    windowMs: MINUTE,
    noSlotDeferMs: 5_000,
    recoverAfterSuccesses: 50,
    blockAfterFailures: 10,
    blockMs: 15 * MINUTE,
    stateTtlMs: 24 * HOUR,
  },
  warming: {
    schedule: [
      [1, 50],
      [2, 100],
      [3, 200],
      [5, 700],
      [7, 1_500],
      [10, 3_000],
      [14, 7_500],
      [18, 15_000],
      [21, 20_000],
      [25, 30_000],
    ],
    graduateDay: 30,
    maxDeferMs: HOUR,
    minDeferMs: 30_000,
  },
  breaker: {
    ringSize: 100,
    windows: [
      { name: 'fast', size: 50, minSample: 50, maxBounceRate: 0.15, maxComplaintRate: 0.04 },
      { name: 'slow', size: 100, minSample: 100, maxBounceRate: 0.08, maxComplaintRate: 0.002 },
    ],
    cooldownMs: 30 * MINUTE,
    reopenCooldownMs: 60 * MINUTE,
    halfOpenProbes: 5,
    halfOpenDeferMs: MINUTE,
    // Most DSNs come within minutes, feedback loops' complaints within hours.
    probationMs: 24 * HOUR,
  },
  orgLimits: { daily: 50_000, hourly: 5_000, dailyTtlMs: 48 * HOUR, hourlyTtlMs: 2 * HOUR },
  smtpIntel: {
    windowMs: 10 * MINUTE,
    bucketMs: MINUTE,
    minSample: 20,
    blockingRate: 0.5,
    blockingDeferMs: 30 * MINUTE,
    degradedRate: 0.3,
    degradedDeferMs: 2 * MINUTE,
  },
  domainBackoff: { threshold: 3, baseMs: MINUTE, maxMs: 30 * MINUTE, streakTtlMs: HOUR },
  blockingReasons: ['blocked', 'badreputation', 'rejected', 'spamdetected', 'policyviolation', 'securityerror', 'authfailure', 'requireptr', 'toomanyconn', 'speeding'],
  defaultPool: 'transactional',
  noEligibleIpDeferMs: 5 * MINUTE,
  engagementBands: [
    { name: 'high', minScore: 70, priority: 0 },
    { name: 'medium', minScore: 40, priority: 1 },
    { name: 'low', minScore: 10, priority: 2 },
    { name: 'cold', minScore: 0, priority: 3 },
  ],
  defaultPriority: 3,
  deferJitter: 0.15,
  eventRepeatMs: { all_ips_blocked: 15 * MINUTE },
  queue: { retries: 5, backoffMs: [30_000, 2 * MINUTE, 8 * MINUTE, 30 * MINUTE, 2 * HOUR] },
  reputation: {
    queryTimeoutMs: 2_000,
    attempts: 3,
    backoffBaseMs: 500,
    concurrency: 32,
    sweepEveryMs: 15 * MINUTE,
    auditEveryMs: 24 * HOUR,
    auditFreshMs: 10 * MINUTE,
    probeTimeoutMs: 5_000,
    relayTimeoutMs: 30_000,
    neighbourSample: 8,
    neighbourListedShare: 0.5,
    causeBounceRate: 0.05,
    causeComplaintRate: 0.001,
    causeSpikeFactor: 3,
    requirePtr: true,
    historyEntries: 50,
    historyDays: 7,
  },
  // The retry schedule of the former `mta-events` queue: 7 posts over about 2.7 hours.
  events: {
    maxAttempts: 7,
    backoffMs: [30_000, 2 * MINUTE, 10 * MINUTE, 30 * MINUTE, HOUR],
    leaseMs: 30_000,
    pollMs: 1_000,
    postTimeoutMs: 10_000,
    // One post per delivered message cost the MTA a tenth of its CPU at 5 KB (perf); 4 in
    // flight is the backpressure: a slow backend gets fewer, larger posts.
    posts: { maxInFlight: 4, maxItems: 500, maxBytes: 2 * 1024 * 1024 },
    // A mailbox delivery can be 34 MB of JSON: the byte bound keeps an outage's memory small.
    held: { maxItems: 20_000, maxBytes: 16 * 1024 * 1024 },
  },
  deliveryLogRetentionDays: 30,
  urlBlocklist: [],
  // SpamAssassin's URIDNSBL waits about 2 s per message for its lists; we ask every name at once.
  uribl: { queryTimeoutMs: 1_500, attempts: 1, backoffBaseMs: 0, maxNames: 24, cacheTtlMs: 10 * MINUTE, unknownTtlMs: MINUTE, cacheMaxEntries: 50_000 },
  // The inbound SMTP listener (docs/bounces.md). 100 recipients is RFC 5321's minimum a
  // server must take; a DSN names one, routed mail rarely more.
  inbound: {
    maxClients: 1_000,
    maxConnectionsPerIp: 20,
    maxRecipients: 100,
    socketTimeoutMs: 60_000,
    closeTimeoutMs: 30_000,
    // Exim's received_headers_max; RFC 5321 §6.3 asks for at least 100 but real paths are < 15.
    maxReceivedHeaders: 30,
    maxForwardTargets: 10,
  },
  // Asynchronous bounces and complaints (mta.md: acceptance horizon, provenance and
  // de-duplication retention are each 16 days).
  feedback: {
    horizonMs: 16 * DAY,
  },
  // mta.md fixes the provider range [0.05, 1], ×0.5, +0.1 after 3 clean days, 50 sends, the
  // 10 % start, 100 bulk sends, 20 % headroom, 6 h, ×8 and 4 h; the rate thresholds are ours
  // (the breaker's slow window is 8 % bounces: warming slows down well before it trips).
  adaptiveWarming: {
    thresholds: {
      minSample: 50,
      accelerate: { maxBounceRate: 0.02, maxDeferralRate: 0.05 },
      decelerate: { bounceRate: 0.05, deferralRate: 0.15 },
    },
    accelerateDays: 2,
    decelerateDays: 0,
    provider: { min: 0.05, max: 1, decreaseFactor: 0.5, recoverStep: 0.1, cleanDaysToRecover: 3 },
    providerMx: [
      { provider: 'gmail.com', mxSuffixes: ['.google.com', '.googlemail.com'] },
      { provider: 'outlook.com', mxSuffixes: ['.outlook.com', '.hotmail.com'] },
      { provider: 'yahoo.com', mxSuffixes: ['.yahoodns.net', '.yahoo.com'] },
      { provider: 'icloud.com', mxSuffixes: ['.icloud.com', '.me.com'] },
    ],
    pacing: { bulkPools: ['campaign'], startFraction: 0.1, minBulkAvailable: 100, transactionalHeadroom: 0.2 },
    pressure: { horizonMs: 6 * HOUR, maxFactor: 8, maxDelayMs: 4 * HOUR, maxEvents: 16 },
  },
  // 25 MB: what most mailbox providers accept as a whole message.
  scan: {
    maxFileBytes: 25 * 1024 * 1024,
    allowedExtensions: ['pdf', 'png', 'jpg', 'jpeg', 'gif', 'webp', 'txt', 'csv', 'ics', 'rtf', 'doc', 'docx', 'xls', 'xlsx', 'ppt', 'pptx', 'odt', 'ods', 'odp', 'zip'],
    signedExtensions: ['pdf', 'png', 'jpg', 'jpeg', 'gif', 'webp', 'bmp', 'tif', 'tiff', 'zip', 'gz', '7z', 'rar', 'docx', 'xlsx', 'pptx', 'odt', 'ods', 'odp', 'doc', 'xls', 'ppt', 'exe', 'dll'],
    equivalentExtensions: [['jpg', 'jpeg', 'jpe'], ['tif', 'tiff'], ['exe', 'dll', 'scr', 'com', 'sys']],
    containerExtensions: { zip: ['docx', 'xlsx', 'pptx', 'odt', 'ods', 'odp', 'jar', 'apk', 'epub'], cfb: ['doc', 'xls', 'ppt', 'msg', 'msi'] },
    genericTypes: ['application/octet-stream', 'binary/octet-stream', 'application/x-download', 'application/download'],
    decoyExtensions: ['pdf', 'doc', 'docx', 'xls', 'xlsx', 'ppt', 'pptx', 'txt', 'csv', 'rtf', 'jpg', 'jpeg', 'png', 'gif', 'zip', 'mp3', 'mp4', 'htm', 'html'],
    executableExtensions: ['exe', 'scr', 'com', 'bat', 'cmd', 'pif', 'cpl', 'msi', 'js', 'jse', 'vbs', 'vbe', 'wsf', 'wsh', 'hta', 'jar', 'ps1', 'lnk', 'reg', 'dll'],
    clamd: { timeoutMs: 30_000, chunkBytes: 64 * 1024 },
  },
  // SMTP submission (docs/submission.md). Ten failures a minute is far above a mail client
  // with a wrong password retrying, far below a guessing attack.
  submission: {
    maxMessageBytes: 25 * 1024 * 1024,
    receiptMs: 4 * DAY,
    authFailures: { max: 10, windowMs: MINUTE, banMs: 15 * MINUTE },
    masterOrganizationId: 'default',
    intakeBatch: { maxInFlight: 4, maxItems: 100, maxBytes: 64 * 1024 * 1024 },
    // A minute: a delivered 25 MB body does not linger, and the scan is one index probe per body.
    bodyPurgeEveryMs: MINUTE,
  },
};

/** The band of a score; `null` for a missing, non-finite or out-of-range score (rule 3: unknown, not clamped). */
export function engagementBand(policy: MtaPolicy, score: unknown): EngagementBand | null {
  if (typeof score !== 'number' || !Number.isFinite(score) || score < 0 || score > 100) return null;
  for (const band of policy.engagementBands) if (score >= band.minScore) return band;
  return null;
}

/** Daily warming cap of an IP on its `day` (1-based); Infinity once graduated. */
export function warmingCap(policy: MtaPolicy, day: number): number {
  if (day >= policy.warming.graduateDay) return Infinity;
  let cap = policy.warming.schedule[0][1];
  for (const [d, c] of policy.warming.schedule) if (day >= d) cap = c;
  return cap;
}

/** Rule 1 of the management endpoints; returns the first violation, or null. */
export function validateProfile(p: IspProfileValues): string | null {
  for (const [k, v] of Object.entries(p)) if (typeof v !== 'number' || !Number.isFinite(v)) return `${k} must be a finite number`;
  if (p.floor <= 0) return 'floor must be greater than 0';
  if (p.floor > p.ceiling) return 'floor must be less than or equal to ceiling';
  if (p.defaultRate < p.floor || p.defaultRate > p.ceiling) return 'defaultRate must be within [floor, ceiling]';
  if (!(p.backoffFactor > 0 && p.backoffFactor < 1)) return 'backoffFactor must be greater than 0 and less than 1';
  if (!(p.recoveryFactor > 1)) return 'recoveryFactor must be greater than 1';
  return null;
}
