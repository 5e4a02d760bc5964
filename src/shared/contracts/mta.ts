/**
 * The contract between the backend and the MTA, in one place (docs/mta.md → "Event catalogue").
 * Both halves import these schemas and their `Static` types: the backend builds the job with
 * `MtaJob` and validates each posted event against `MTA_EVENT_DATA`; the MTA's `/send`
 * validates the job with `MtaJobSchema` and its outbox types every event with `MtaEventData`.
 * Nothing else restates a field name or an event name (test/architecture.test.ts).
 *
 * Compatibility rules: the job refuses unknown fields (a typo must not be silently dropped);
 * event data allows them (a newer MTA may add fields), and an unknown event name is
 * acknowledged and ignored by the backend, so a newer MTA never dead-letters it.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

// ------------------------------------------------------------------------------- the job

export const IP_POOLS = ['transactional', 'campaign'] as const;
export type IpPool = (typeof IP_POOLS)[number];

/** The fields every job carries, whatever its content. */
const JobCommon = {
  messageId: Type.String({ minLength: 1, maxLength: 255, description: 'Unique ID for correlation (also the idempotency key per organization)' }),
  to: Type.String({ minLength: 3, maxLength: 254, description: 'Recipient address' }),
  from: Type.String({ minLength: 1, maxLength: 512, description: 'Sender: `a@b` or `Name <a@b>`' }),
  ipPool: Type.Union(IP_POOLS.map((p) => Type.Literal(p))),
  organizationId: Type.String({ minLength: 1, maxLength: 128, description: 'Scope of the circuit breaker and limits' }),
  engagementScore: Type.Optional(
    Type.Unknown({
      description:
        'Number from 0 to 100 (0 = cold). Omitted, null, non-finite or out-of-range values are treated as unknown (default band), never clamped.',
    }),
  ),
  dkimDomain: Type.String({ minLength: 1, maxLength: 253, description: 'Domain used for DKIM signing; must equal the From domain' }),
  campaignId: Type.Optional(Nullable(Type.String({ maxLength: 128, description: 'Provenance for bounce and complaint attribution' }))),
};

/**
 * The email job of mta.md (`POST {MTA_URL}/send`) with built content: the MTA composes the
 * MIME from `subject`/`html`/`text`.
 */
export const MtaBuiltJobSchema = Type.Object(
  {
    ...JobCommon,
    subject: Type.String({ maxLength: 998 }),
    html: Type.String({ description: 'HTML body' }),
    text: Type.Optional(Type.String({ description: 'Plain-text body' })),
    replyTo: Type.Optional(Type.String({ maxLength: 512 })),
    headers: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 998 }), { maxProperties: 50, description: 'Extra headers' })),
  },
  { additionalProperties: false },
);

/**
 * The same job carrying already-built MIME (SMTP submission; inbound forwarding later):
 * `raw` is the message's octets in base64 (JSON text cannot hold 8-bit octets). It is sent
 * byte for byte; the MTA only adds the header fields it owns (DKIM-Signature, and Message-ID
 * or Date when the message lacks them).
 */
export const MtaRawJobSchema = Type.Object(
  {
    ...JobCommon,
    raw: Type.String({ minLength: 1, contentEncoding: 'base64', description: 'The RFC 5322 message, base64 of its octets' }),
  },
  { additionalProperties: false },
);

/**
 * A job is one of the two content variants; every other field and the queue payload derived
 * from it are the same. `POST /send` takes the built variant (MtaBuiltJobSchema); raw jobs
 * enter through the MTA's own doors (SMTP submission).
 */
export const MtaJobSchema = Type.Union([MtaBuiltJobSchema, MtaRawJobSchema]);
type WithPool<T> = Omit<T, 'ipPool'> & { ipPool: IpPool };
export type MtaBuiltJob = WithPool<Static<typeof MtaBuiltJobSchema>>;
export type MtaRawJob = WithPool<Static<typeof MtaRawJobSchema>>;
export type MtaJob = MtaBuiltJob | MtaRawJob;
/** A raw (already-built MIME) job. */
export const isRawJob = <T extends object>(j: T): j is Extract<T, { raw: string }> => typeof (j as { raw?: unknown }).raw === 'string';

/**
 * A raw job as SMTP submission queues it: the octets of one DATA are stored once
 * (mta_submission_bodies) and every recipient's job names them by `rawBody`, so 100
 * recipients of 25 MB are not 100 copies in one transaction. The dispatcher reads the body
 * back into `raw` before the pipeline runs; nothing past it sees this form. MTA-internal:
 * no door accepts it.
 */
export type MtaStoredRawJob = Omit<MtaRawJob, 'raw'> & { rawBody: string };
export const isStoredRawJob = <T extends object>(j: T): j is Extract<T, { rawBody: string }> => typeof (j as { rawBody?: unknown }).rawBody === 'string';

/** `POST /send`'s 202 body (decisions.md). */
export const MtaJobAcceptedSchema = Type.Object({
  data: Type.Object({ jobId: Type.String(), messageId: Type.String(), status: Type.Literal('queued') }),
});
export type MtaJobAccepted = Static<typeof MtaJobAcceptedSchema>;

// ------------------------------------------------------------- credential verification

/**
 * `POST /webhooks/mta-verify-credential` (backend-api.md), signed like the MTA's events: the
 * MTA asks whether a password given at SMTP AUTH is one of the backend's app passwords.
 */
/** App passwords start with this; the MTA asks the backend about no other password. */
export const APP_PASSWORD_PREFIX = 'lm_app_';
export const MtaVerifyCredentialSchema = Type.Object(
  {
    password: Type.String({ minLength: 1, maxLength: 512 }),
    purpose: Type.Literal('submission'),
  },
  { additionalProperties: false },
);
export type MtaVerifyCredential = Static<typeof MtaVerifyCredentialSchema>;
export const MtaVerifyCredentialResultSchema = Type.Object({
  data: Type.Object({
    valid: Type.Boolean(),
    id: Type.Optional(Type.String()),
    organizationId: Type.Optional(Type.String()),
    /** Sender addresses or domains the password may use; empty: any the organization signs for. */
    senders: Type.Optional(Type.Array(Type.String())),
  }),
});
export type MtaVerifyCredentialResult = Static<typeof MtaVerifyCredentialResultSchema>;

// ---------------------------------------------------------------------------- the events

/** Event names (mta.md → Events). Code names an event through this object, never a literal. */
export const MTA_EVENT = {
  sent: 'sent',
  bounced: 'bounced',
  dropped: 'dropped',
  complained: 'complained',
  inboundReceived: 'inbound.received',
  orgCircuitBreaker: 'org.circuit_breaker',
  ipBlocklisted: 'ip.blocklisted',
  ipDelisted: 'ip.delisted',
  ipWarmingComplete: 'ip.warming_complete',
  allIpsBlocked: 'all_ips_blocked',
} as const;
export type MtaEventName = (typeof MTA_EVENT)[keyof typeof MTA_EVENT];
export const MTA_EVENT_NAMES = Object.values(MTA_EVENT) as MtaEventName[];
/** Events about the MTA's own state (not about one message). */
export const MTA_OPERATIONAL_EVENTS = [MTA_EVENT.orgCircuitBreaker, MTA_EVENT.ipBlocklisted, MTA_EVENT.ipDelisted, MTA_EVENT.ipWarmingComplete, MTA_EVENT.allIpsBlocked] as const;
export type MtaOperationalEventName = (typeof MTA_OPERATIONAL_EVENTS)[number];

const Str = (max: number) => Type.String({ maxLength: max });
const Id = Type.String({ minLength: 1, maxLength: 255 });
const Address = Type.String({ minLength: 3, maxLength: 254 });
const Iso = Type.String({ minLength: 10, maxLength: 40, description: 'ISO 8601 date-time (UTC)' });
const Code = Nullable(Type.Integer({ minimum: 200, maximum: 599 }));
/** A count or size: past the safe integers JavaScript loses digits and PostgreSQL's bigint overflows. */
const Count = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
const Open = { additionalProperties: true } as const;

/** What every per-message event says about the message it concerns. */
const MessageRef = {
  messageId: Id,
  organizationId: Type.String({ minLength: 1, maxLength: 128 }),
  campaignId: Nullable(Str(128)),
  recipient: Address,
};

/** The recipient's MX answered 2xx to DATA: delivery in the lifecycle's terms (`email.delivered`). */
const SentData = Type.Object(
  {
    ...MessageRef,
    jobId: Id,
    domain: Str(253),
    pool: Nullable(Str(100)),
    ip: Str(100),
    mxHost: Nullable(Str(253)),
    smtpCode: Code,
    smtpResponse: Nullable(Str(2000)),
    tls: Type.Boolean(),
    attempt: Count,
  },
  Open,
);

/** A permanent (5xx) refusal, or a message that expired after its last deferral (`soft`, reason `expired`). */
const BouncedData = Type.Object(
  {
    ...MessageRef,
    jobId: Nullable(Id),
    domain: Str(253),
    type: Type.Union([Type.Literal('hard'), Type.Literal('soft')]),
    /** Sisimai's vocabulary, lower case (decisions.md). */
    reason: Type.String({ minLength: 1, maxLength: 50 }),
    smtpCode: Code,
    enhancedCode: Nullable(Str(20)),
    smtpResponse: Nullable(Str(2000)),
    mxHost: Nullable(Str(253)),
    pool: Nullable(Str(100)),
    ip: Nullable(Str(100)),
    attempt: Count,
    /** `dsn`: an asynchronous bounce report received after the remote accepted the message (attempt 0, jobId null). */
    source: Type.Optional(Type.Union([Type.Literal('smtp'), Type.Literal('dsn')])),
  },
  Open,
);

/**
 * The pipeline dropped the job without sending (mta.md phases 1 and 2): `suppressed` (the
 * recipient is on the suppression list; `reason` is the list entry's reason, `hard_bounce`,
 * `complaint` or `manual`, or `unknown` when the entry went away meanwhile) or `screened`
 * (content screening; `reason` names the check, e.g. `blocked_url`, `spam_score`). Written
 * with the drop's delivery-log row (the outbox), so the backend learns of it at once.
 */
const DroppedData = Type.Object(
  {
    ...MessageRef,
    jobId: Id,
    domain: Str(253),
    status: Type.Union([Type.Literal('suppressed'), Type.Literal('screened')]),
    reason: Type.String({ minLength: 1, maxLength: 100 }),
    attempt: Count,
  },
  Open,
);

/** A feedback report (ARF) about one of our messages. */
const ComplainedData = Type.Object(
  {
    ...MessageRef,
    messageId: Nullable(Id),
    organizationId: Nullable(Type.String({ minLength: 1, maxLength: 128 })),
    feedbackType: Nullable(Str(50)),
    /** The reporter's User-Agent field (RFC 5965). */
    userAgent: Type.Optional(Nullable(Str(200))),
    /** Which of our tokens attributed it: envelope, cfbl_feedback_id or verp_scrape (docs/bounces.md). */
    source: Type.Optional(Str(30)),
  },
  Open,
);

/** One attachment of an inbound message, described (its bytes stay in `raw`). */
const InboundAttachment = Type.Object(
  { filename: Nullable(Str(255)), contentType: Str(255), size: Count, contentId: Type.Optional(Nullable(Str(998))) },
  Open,
);

/** What the MTA's inbound authentication found (mailauth), and the header it wrote. */
const InboundAuthentication = Type.Object(
  {
    /** The `Authentication-Results` header value the MTA added. */
    header: Str(8000),
    spf: Str(20),
    dkim: Str(20),
    dmarc: Str(20),
    /** The DMARC policy of the From domain (`none`, `quarantine`, `reject`), if one was found. */
    dmarcPolicy: Type.Optional(Nullable(Str(20))),
  },
  Open,
);

export type InboundAuthentication = Static<typeof InboundAuthentication>;

/** A message received for a routed address or mailbox. */
const InboundReceivedData = Type.Object(
  {
    messageId: Nullable(Str(998)),
    from: Type.String({ minLength: 1, maxLength: 1000 }),
    to: Type.Array(Address, { minItems: 1, maxItems: 1000 }),
    subject: Str(998),
    text: Nullable(Type.String()),
    html: Nullable(Type.String()),
    inReplyTo: Nullable(Str(998)),
    references: Type.Array(Str(998), { maxItems: 100 }),
    receivedAt: Iso,
    /** The route that took it (issue 18); absent from MTAs older than inbound routing. */
    route: Type.Optional(Type.Object({ domain: Str(253), address: Str(64) }, Open)),
    attachments: Type.Optional(Type.Array(InboundAttachment, { maxItems: 1000 })),
    authentication: Type.Optional(InboundAuthentication),
    /** Size of the message as received, in bytes. */
    rawSize: Type.Optional(Count),
    /** The message as received, base64: the backend keeps the bytes (`GET /admin/inbox/:id/raw`). */
    raw: Type.Optional(Type.String()),
  },
  Open,
);

const OrgCircuitBreakerData = Type.Object(
  {
    organizationId: Type.String({ minLength: 1, maxLength: 128 }),
    severity: Type.Literal('critical'),
    state: Type.Literal('open'),
    window: Nullable(Str(50)),
    signal: Nullable(Str(50)),
    rate: Nullable(Type.Number()),
    threshold: Nullable(Type.Number()),
    sample: Nullable(Count),
    cooldownMs: Count,
    openedAt: Iso,
  },
  Open,
);

const IpListingData = Type.Object(
  {
    ip: Str(100),
    zone: Str(253),
    pools: Type.Array(Str(100)),
    at: Iso,
    /** `critical` quarantines the address; `warning` zones are advisory. */
    severity: Type.Optional(Type.Union([Type.Literal('critical'), Type.Literal('warning')])),
    quarantined: Type.Optional(Type.Boolean()),
    /** The zone's 127.x answers, and their sub-lists where the zone has a code table (SBL, XBL, …). */
    codes: Type.Optional(Type.Array(Str(15))),
    lists: Type.Optional(Type.Array(Str(20))),
  },
  Open,
);

const IpWarmingCompleteData = Type.Object({ ip: Str(100), pools: Type.Array(Str(100)), startedAt: Iso, graduatedAt: Iso, day: Count }, Open);

const AllIpsBlockedData = Type.Object(
  {
    pool: Str(100),
    dedicatedIp: Nullable(Str(100)),
    measured: Type.Boolean(),
    /** The pool's traffic goes through MTA_FAILOVER_RELAY_URL instead of halting. */
    viaRelay: Type.Optional(Type.Boolean()),
    addresses: Type.Array(Type.Object({ ip: Str(100), reason: Str(100), zone: Nullable(Str(253)), since: Nullable(Iso) }, Open)),
  },
  Open,
);

/** Each event's `data` schema, by name. */
export const MTA_EVENT_DATA = {
  [MTA_EVENT.sent]: SentData,
  [MTA_EVENT.bounced]: BouncedData,
  [MTA_EVENT.dropped]: DroppedData,
  [MTA_EVENT.complained]: ComplainedData,
  [MTA_EVENT.inboundReceived]: InboundReceivedData,
  [MTA_EVENT.orgCircuitBreaker]: OrgCircuitBreakerData,
  [MTA_EVENT.ipBlocklisted]: IpListingData,
  [MTA_EVENT.ipDelisted]: IpListingData,
  [MTA_EVENT.ipWarmingComplete]: IpWarmingCompleteData,
  [MTA_EVENT.allIpsBlocked]: AllIpsBlockedData,
} satisfies Record<MtaEventName, TSchema>;

export type MtaEventData = { [K in MtaEventName]: Static<(typeof MTA_EVENT_DATA)[K]> };

/** One posted event (decisions.md → MTA ↔ backend). `id` is stable across retries: the backend applies it at most once. */
export const MtaEventEnvelopeSchema = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 200 }),
    event: Type.String({ minLength: 1, maxLength: 100 }),
    timestamp: Iso,
    data: Type.Object({}, Open),
  },
  Open,
);
export type MtaEventEnvelope<K extends MtaEventName = MtaEventName> = { id: string; event: K; timestamp: string; data: MtaEventData[K] };

/** Events in one posted array at most (the MTA's relay sends up to this many; the backend takes 1 to this many). */
export const MTA_EVENT_BATCH_MAX = 500;

export const isMtaEventName = (s: string): s is MtaEventName => (MTA_EVENT_NAMES as string[]).includes(s);

// ------------------------------------------------------------ personal-mailbox delivery

/**
 * `POST /webhooks/mta-mailbox` (backend-api.md), signed like the MTA's events: mail for an
 * address in the MTA's mailbox cache. The MTA posts it through its outbox, so it waits while
 * the backend is down; `id` is stable across retries and the backend stores it at most once.
 */
export const MtaMailboxDeliverySchema = Type.Object(
  {
    id: Type.String({ minLength: 1, maxLength: 200 }),
    mailboxId: Type.String({ minLength: 1, maxLength: 200 }),
    organizationId: Type.String({ minLength: 1, maxLength: 128 }),
    /** The envelope recipient that matched the cache entry. */
    address: Type.String({ minLength: 3, maxLength: 254 }),
    envelopeFrom: Type.String({ maxLength: 998 }),
    receivedAt: Iso,
    authentication: InboundAuthentication,
    rawSize: Count,
    /** The message as received plus the MTA's Authentication-Results header, base64. */
    raw: Type.String({ minLength: 1 }),
  },
  { additionalProperties: true },
);
export type MtaMailboxDelivery = Static<typeof MtaMailboxDeliverySchema>;
/** The backend's answer: `usedBytes` after storing, which the MTA keeps beside the entry's quota. */
export const MtaMailboxDeliveryResultSchema = Type.Object({
  data: Type.Object({ stored: Type.Boolean(), duplicate: Type.Boolean(), usedBytes: Count }),
});
export type MtaMailboxDeliveryResult = Static<typeof MtaMailboxDeliveryResultSchema>;

// --------------------------------------------------------------------------- delivery log

/**
 * `GET /delivery-logs` (mta.md, master key): one row per attempt outcome, newest first. A
 * `suppressed` or `screened` row is written with its `dropped` event, which is how the
 * backend learns of the drop (it never reads this log).
 */
export const MTA_LOG_STATUSES = ['sent', 'bounced', 'deferred', 'screened', 'suppressed', 'failed'] as const;
export type MtaLogStatus = (typeof MTA_LOG_STATUSES)[number];
export const MtaLogStatusSchema = Type.Union([
  Type.Literal('sent'),
  Type.Literal('bounced'),
  Type.Literal('deferred'),
  Type.Literal('screened'),
  Type.Literal('suppressed'),
  Type.Literal('failed'),
]) satisfies TSchema & { static: MtaLogStatus };
export const MtaDeliveryLogRecordSchema = Type.Object({
  id: Type.String(),
  messageId: Type.String(),
  jobId: Nullable(Type.String()),
  organizationId: Type.String(),
  recipient: Type.String(),
  domain: Type.String(),
  pool: Nullable(Type.String()),
  ip: Nullable(Type.String()),
  status: MtaLogStatusSchema,
  hard: Nullable(Type.Boolean()),
  code: Nullable(Type.Integer()),
  enhancedCode: Nullable(Type.String()),
  /** For a `suppressed` drop: `suppressed: <hard_bounce|complaint|manual>`; for `screened`: the screening rule. */
  reason: Nullable(Type.String()),
  response: Nullable(Type.String()),
  mxHost: Nullable(Type.String()),
  attempt: Nullable(Type.Integer()),
  createdAt: Type.String(),
});
export type MtaDeliveryLogRecord = Static<typeof MtaDeliveryLogRecordSchema>;
export const MtaDeliveryLogPageSchema = Type.Object({ data: Type.Array(MtaDeliveryLogRecordSchema), nextCursor: Nullable(Type.String()) });
export type MtaDeliveryLogPage = Static<typeof MtaDeliveryLogPageSchema>;
/** The page size `GET /delivery-logs` allows at most. */
export const MTA_LOG_PAGE_MAX = 1000;

// ------------------------------------------------------------------------ queue by domain

/** One row of `GET /queue/domains` (the MTA's queue by destination domain; the dashboard shows it). */
export interface QueueDomain {
  domain: string;
  /** Due now. */
  pending: number;
  /** Waiting for their run time or for their group's pause. */
  delayed: number;
  active: number;
  /** Enqueue time of the oldest pending job (ISO), null when none is pending. */
  oldestAt: string | null;
  /** The newest reply a remote server gave for the domain (delivery log). */
  lastReply: { code: number; text: string | null; at: string } | null;
  /** A pause of the domain's queue group(s), with the reason the deferring job recorded. */
  paused: { reason: string | null; until: string } | null;
}
