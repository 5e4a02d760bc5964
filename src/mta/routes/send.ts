import { poolWithoutRule } from '../pipeline/07-resolve-pool.js';
import { isUtf8 } from 'node:buffer';
import { MtaBuiltJobSchema, MtaJobAcceptedSchema, type MtaBuiltJob } from '../../shared/contracts/mta.js';
import { AppError, badInput, forbidden } from '../../shared/errors.js';
import { inputError, type HttpApp } from '../../shared/http.js';
import { findInputFault, markChecked, type InputFault } from '../../shared/input.js';
import { asciiDomain, normalizeAddress, parseMailbox } from '../../shared/mail/address.js';
import { isHeaderName, isReservedHeader, withoutCfbl } from '../../shared/mail/headers.js';
import type { EnqueueInput } from '../../shared/queue/types.js';
import type { MtaContext } from '../context.js';
import { GroupCommit } from '../intake.js';
import { toEnqueueInput, type MtaJobPayload } from '../job.js';
import { isDkimDomain } from '../stores/dkim.js';
import { ErrorResponse } from './schemas.js';


/**
 * POST /send: validate, authorize, apply back-pressure, store the job durably, answer 202.
 * Concurrent requests share one INSERT (group commit, ../intake.ts); each is answered after
 * the statement holding its job has committed.
 */
export function sendRoutes(app: HttpApp, m: MtaContext): void {
  const intake = new GroupCommit<MtaJobPayload>(m.queue);
  app.addHook('onClose', async () => intake.drain());
  // Encapsulated: only /send keeps the JSON text of its body (see storedJson).
  app.register(async (scoped) => sendRoute(scoped as unknown as HttpApp, m, intake));
}

type RawJsonRequest = { rawJson?: Buffer };

function sendRoute(app: HttpApp, m: MtaContext, intake: GroupCommit<MtaJobPayload>): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    const r = readJobBody(body as Buffer);
    (req as RawJsonRequest).rawJson = r.raw;
    if (r.kind === 'fastify') return parseJson(req, r.text, done);
    if (r.kind === 'fault') return done(inputError(r.fault), undefined);
    if (typeof r.value === 'object' && r.value !== null) markChecked(r.value);
    done(null, r.value);
  });
  app.post(
    '/send',
    {
      onRequest: m.auth.anyKey,
      bodyLimit: Math.max(1024 * 1024, m.services.config.CONTENT_MAX_SIZE_KB * 1024 * 3 + 256 * 1024),
      schema: {
        tags: ['send'],
        summary: 'Queue one email',
        security: [{ bearer: [] }],
        body: MtaBuiltJobSchema,
        response: { 202: MtaJobAcceptedSchema, 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 429: ErrorResponse, 503: ErrorResponse },
      },
    },
    async (req, reply) => {
      const body = req.body as MtaBuiltJob;
      const principal = req.mtaPrincipal!;
      if (principal.kind === 'org' && principal.organizationId !== body.organizationId) {
        throw forbidden('This API key may only send for its own organization', 'organization_mismatch');
      }
      const input = validate(m, body);
      const payload = input.payload;

      const rule = m.stores.poolRules.ruleFor(body.organizationId);
      const pool = rule && m.pools.has(rule.pool) ? rule.pool : poolWithoutRule({ pools: m.pools, policy: m.policy }, payload.ipPool);
      if (await m.state.ipStatus.poolHalted(pool, m.failoverRelay)) {
        throw new AppError('unavailable', `Every sending IP of pool ${pool} is blocked (emergency mode); retry later`, {
          reason: 'all_ips_blocked',
          headers: { 'retry-after': '300' },
        });
      }
      if ((await m.queueDepth()) >= m.services.config.QUEUE_MAX_DEPTH) {
        throw new AppError('rate_limited', 'The delivery queue is full; retry later', { reason: 'queue_full', headers: { 'retry-after': '30' } });
      }

      // Counted before the write so concurrent requests of this instance see each other.
      m.noteEnqueued();
      input.payloadJson = storedJson((req as RawJsonRequest).rawJson, payload);
      const jobId = await intake.enqueue(input, Number(req.headers['content-length']) || body.html.length + (body.text?.length ?? 0));
      reply.code(202);
      // A repeat's messageId is the first job's: the dedupe key contains it.
      return { data: { jobId, messageId: payload.messageId, status: 'queued' as const } };
    },
  );
}

export type JobBody =
  | { kind: 'parsed'; raw: Buffer; value: unknown }
  | { kind: 'fault'; raw: Buffer; fault: InputFault }
  /** Not JSON, or a forbidden key: Fastify's own parser answers, so the answers stay its own. */
  | { kind: 'fastify'; raw: Buffer; text: string };

/**
 * /send's body: its bytes are kept (storedJson) and decoded once. Fastify's parser finds
 * __proto__ / constructor keys with two regex scans of the whole text (2 % of the product's
 * CPU at 100 KB); the edge's one iterative walk over the parsed value (../../shared/input.ts)
 * finds them with the input policy's faults.
 */
export function readJobBody(body: Buffer): JobBody {
  let raw = body;
  // A UTF-8 byte order mark: JSON.parse refuses it and the stored text must not start with it.
  if (raw.length >= 3 && raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf) raw = raw.subarray(3);
  const text = raw.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: 'fastify', raw, text };
  }
  const fault = findInputFault(value, 'body', { forbiddenKeys: true });
  if (fault?.reason === 'forbidden_key') return { kind: 'fastify', raw, text };
  return fault ? { kind: 'fault', raw, fault } : { kind: 'parsed', raw, value };
}

/** Field rules the schema cannot say; returns the queue input. */
function validate(m: MtaContext, body: MtaBuiltJob): EnqueueInput<MtaJobPayload> {
  // Stored normalized: routing, throttling and suppression use the A-label domain.
  const to = normalizeAddress(body.to);
  if (!to) throw badInput('to must be one email address (local@domain)', 'invalid_address');
  if (!parseMailbox(body.from)) throw badInput('from must be one address, optionally with a display name', 'invalid_address');
  if (body.replyTo !== undefined && !parseMailbox(body.replyTo)) throw badInput('replyTo must be one address', 'invalid_address');
  // A-labels, as domainOf(from) gives them for the DKIM alignment check.
  const dkimDomain = asciiDomain(body.dkimDomain.trim());
  if (!isDkimDomain(dkimDomain)) throw badInput('dkimDomain must be a domain name', 'invalid_domain');
  if (/[\r\n]/.test(body.subject)) throw badInput('subject must not contain line breaks', 'invalid_header');
  for (const [name, value] of Object.entries(body.headers ?? {})) {
    if (!isHeaderName(name)) throw badInput(`headers: "${name.slice(0, 80)}" is not a valid header name`, 'invalid_header');
    if (isReservedHeader(name)) throw badInput(`headers: ${name} cannot be set; the MTA writes it or it belongs to a job field`, 'reserved_header');
    if (/[\r\n\0]/.test(value)) throw badInput(`headers.${name} must not contain line breaks`, 'invalid_header');
  }
  const s = body.engagementScore;
  if (s !== undefined && s !== null && typeof s !== 'number') throw badInput('engagementScore must be a number from 0 to 100', 'validation_error');
  const job: MtaBuiltJob = {
    ...body,
    // A caller's CFBL-* fields are removed, not refused: the MTA writes its own pair (mta.md).
    headers: withoutCfbl(body.headers),
    to,
    dkimDomain,
  };
  return toEnqueueInput(m.policy, job, m.services.clock.now());
}

/**
 * The queue payload as JSON text without serialising the body again (at 100 KB that was the
 * largest single cost of intake): the request's own JSON — the schema allows no other
 * properties and sets no defaults, so it holds exactly the parsed body — with the fields `validate` normalises or
 * adds appended. JSON.parse keeps the last of repeated keys, so the appended values win.
 */
export function storedJson(raw: Buffer | undefined, p: MtaJobPayload): Buffer | undefined {
  // Bytes that are not UTF-8 were decoded with U+FFFD replacements: the queue serialises the
  // parsed payload instead (PostgreSQL text must be valid UTF-8).
  if (raw === undefined || !isUtf8(raw)) return undefined;
  const end = raw.lastIndexOf(0x7d); // the closing brace
  if (end < 0) return undefined;
  const { to, dkimDomain, engagementScore, recipient, domain, band, acceptedAt } = p;
  const headers = 'headers' in p ? p.headers : undefined;
  const tail = Buffer.from(`,${JSON.stringify({ headers, to, dkimDomain, engagementScore, recipient, domain, band, acceptedAt }).slice(1)}`, 'utf8');
  return Buffer.concat([raw.subarray(0, end), tail]);
}
