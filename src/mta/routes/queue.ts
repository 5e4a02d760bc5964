import { Type } from '@sinclair/typebox';
import { conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Job } from '../../shared/queue/types.js';
import type { MtaContext } from '../context.js';
import type { MtaQueuedPayload } from '../job.js';
import { queueDomains } from '../stores/queue-domains.js';
import { Data, ErrorResponse, masterErrors, OrgId } from './schemas.js';

const iso = (t: number | null) => (t === null ? null : new Date(t).toISOString());
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);

// Fields read from the job's payload are null when the stored payload is not valid JSON
// (`payloadError` says why; such a job fails at its claim) — shown, rather than a 500.
const JobSummary = Type.Object({
  jobId: Type.String(),
  state: Type.String(),
  messageId: Nullable(Type.String()),
  organizationId: Nullable(Type.String()),
  to: Nullable(Type.String()),
  domain: Nullable(Type.String()),
  ipPool: Nullable(Type.String()),
  band: Nullable(Type.String()),
  priority: Type.Integer(),
  attempts: Type.Integer(),
  maxAttempts: Type.Integer(),
  runAt: Type.String(),
  createdAt: Type.String(),
  payloadError: Type.Optional(Type.String()),
});
const Attempt = Type.Object({
  attempt: Type.Integer(),
  startedAt: Type.String(),
  finishedAt: Type.String(),
  outcome: Type.String(),
  error: Type.Optional(Type.String()),
  reason: Type.Optional(Type.String()),
});
const JobDetails = Type.Composite([
  JobSummary,
  Type.Object({
    groupKey: Type.String(),
    subject: Nullable(Type.String()),
    from: Nullable(Type.String()),
    finishedAt: Nullable(Type.String()),
    lastError: Nullable(Type.String()),
    history: Type.Array(Attempt),
    deliveryEvents: Type.Array(Type.Object({ status: Type.String(), reason: Nullable(Type.String()), code: Nullable(Type.Integer()), createdAt: Type.String() })),
  }),
]);

function summary(j: Job<MtaQueuedPayload>) {
  const p = j.payload as MtaQueuedPayload | null;
  return {
    jobId: j.id,
    state: j.state,
    messageId: p?.messageId ?? null,
    organizationId: p?.organizationId ?? null,
    to: p?.recipient ?? null,
    domain: p?.domain ?? null,
    ipPool: p?.ipPool ?? null,
    band: p?.band ?? null,
    priority: j.priority,
    attempts: j.attempts,
    maxAttempts: j.maxAttempts,
    runAt: iso(j.runAt)!,
    createdAt: iso(j.createdAt)!,
    ...(j.payloadError === undefined ? {} : { payloadError: j.payloadError }),
  };
}

const DomainRow = Type.Object({
  domain: Type.String(),
  pending: Type.Integer({ description: 'Due now' }),
  delayed: Type.Integer({ description: 'Waiting for their time or for the paused group' }),
  active: Type.Integer(),
  oldestAt: Nullable(Type.String({ description: 'Enqueue time of the oldest pending job' })),
  lastReply: Nullable(Type.Object({ code: Type.Integer(), text: Nullable(Type.String()), at: Type.String() })),
  paused: Nullable(Type.Object({ reason: Nullable(Type.String()), until: Type.String() })),
});

const JobIdParam = Type.Object({ jobId: Type.String({ minLength: 1, maxLength: 20 }) });

/** /queue: inspect and cancel delivery jobs (master key only). */
export async function queueRoutes(app: HttpApp, m: MtaContext): Promise<void> {
  app.addHook('onRequest', m.auth.masterOnly);
  const tags = ['queue'];
  const security = [{ bearer: [] }];
  const q = m.queue;

  app.get(
    '/queue/stats',
    {
      schema: {
        tags,
        security,
        summary: 'Jobs by state (pending = due now, delayed = waiting for their time)',
        response: {
          200: Data(
            Type.Object({ pending: Type.Integer(), active: Type.Integer(), completed: Type.Integer(), failed: Type.Integer(), delayed: Type.Integer(), cancelled: Type.Integer() }),
          ),
          ...masterErrors,
        },
      },
    },
    async () => ({ data: await q.stats() }),
  );

  app.get(
    '/queue/pending',
    {
      schema: {
        tags,
        security,
        summary: 'Pending jobs (due and delayed), oldest first',
        querystring: Type.Object(
          {
            limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
            offset: Type.Integer({ minimum: 0, maximum: 1_000_000, default: 0 }),
            domain: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Data(Type.Array(JobSummary)), ...masterErrors },
      },
    },
    async (req) => {
      const { limit, offset, domain } = req.query;
      const jobs = await q.pending({ limit, offset, groupKeySuffix: domain ? `:${domain.toLowerCase()}` : undefined });
      return { data: jobs.map(summary) };
    },
  );

  app.get(
    '/queue/domains',
    {
      schema: {
        tags,
        security,
        summary: 'Queued work by destination domain: counts, oldest job, last remote reply, pause and its reason; pass pagination.cursor back as cursor',
        querystring: Type.Object(
          {
            limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
            cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ data: Type.Array(DomainRow), pagination: Type.Object({ limit: Type.Integer(), cursor: Nullable(Type.String()), isDone: Type.Boolean() }) }),
          ...masterErrors,
        },
      },
    },
    async (req) => {
      const { limit, cursor } = req.query;
      const { rows, isDone } = await queueDomains(m.services.db, q.name, m.services.clock.now(), cursor?.toLowerCase() ?? null, limit);
      return {
        data: rows,
        pagination: { limit, cursor: isDone ? null : rows[rows.length - 1]!.domain, isDone },
      };
    },
  );

  app.get(
    '/queue/jobs/:jobId',
    {
      schema: { tags, security, summary: 'A job with its attempt history', params: JobIdParam, response: { 200: Data(JobDetails), 404: ErrorResponse, ...masterErrors } },
    },
    async (req) => {
      const job = await q.get(req.params.jobId);
      if (!job) throw notFound('Job not found', 'job_not_found');
      const p = job.payload as MtaQueuedPayload | null;
      const events = p ? (await m.stores.logs.forMessage(p.messageId)).filter((e) => e.jobId === job.id) : [];
      return {
        data: {
          ...summary(job),
          groupKey: job.groupKey,
          subject: p && 'subject' in p ? p.subject : null,
          from: p?.from ?? null,
          finishedAt: iso(job.finishedAt),
          lastError: job.lastError,
          history: job.history,
          deliveryEvents: events.map((e) => ({ status: e.status, reason: e.reason ?? null, code: e.code ?? null, createdAt: e.createdAt })),
        },
      };
    },
  );

  app.delete(
    '/queue/jobs/:jobId',
    {
      schema: {
        tags,
        security,
        summary: 'Cancel a pending job',
        params: JobIdParam,
        response: { 200: Data(Type.Object({ jobId: Type.String(), cancelled: Type.Boolean() })), 404: ErrorResponse, 409: ErrorResponse, ...masterErrors },
      },
    },
    async (req) => {
      const { jobId } = req.params;
      if (await q.cancel(jobId)) return { data: { jobId, cancelled: true } };
      const job = await q.get(jobId);
      if (!job) throw notFound('Job not found', 'job_not_found');
      throw conflict(`Only pending jobs can be cancelled; this one is ${job.state}`, 'job_not_pending');
    },
  );

  app.post(
    '/queue/flush',
    {
      schema: {
        tags,
        security,
        summary: "Cancel every pending job of an organization (running jobs finish)",
        querystring: Type.Object({ orgId: OrgId }, { additionalProperties: false }),
        response: { 200: Data(Type.Object({ organizationId: Type.String(), cancelled: Type.Integer() })), ...masterErrors },
      },
    },
    async (req) => ({ data: { organizationId: req.query.orgId, cancelled: await q.cancelByOrg(req.query.orgId) } }),
  );
}
