/**
 * POST /webhooks/{mta,ses,resend,mandrill,relay}: each route only verifies and translates;
 * applyFeedback() has the effects. In this encapsulated scope every body is kept as the raw
 * Buffer (signatures are over bytes), each route has its own size limit, and before a body is
 * read: a route whose secret is unset answers 503, missing signature headers or a stale
 * timestamp 401, and a full budget of bodies in transit 503 `busy`.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import { AppError, badInput, forbidden, unauthenticated, unavailable } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Logger } from '../../shared/log.js';
import { FeedbackFormatError, type FeedbackEvent, type Translation } from './lifecycle.js';
import { Batcher } from '../../shared/batch.js';
import { BodyBudget } from '../../shared/body-budget.js';
import { inboundBodyLimits } from './policy.js';
import { parseDelivery, storeDelivery } from '../mailboxes/store.js';
import { applyFeedback, applyFeedbackGroups, type ApplyResult, type PipelineDeps } from './pipeline.js';
import { mandrillBatchTime, parseMandrillEvents, translateMandrill } from './translate/mandrill.js';
import { translateMta } from './translate/mta.js';
import { translateRelay } from './translate/relay.js';
import { translateResend } from './translate/resend.js';
import { translateSes } from './translate/ses.js';
import { checkTolerance, VerificationError, type HeaderBag } from './verify/common.js';
import { MTA_SCHEME, precheckTimestamped, RELAY_SCHEME, verifyTimestampedHmac } from './verify/hmac.js';
import { parseFormFields, verifyMandrill } from './verify/mandrill.js';
import {
  httpsTextFetcher,
  parseSnsMessage,
  snsCertUrlRegion,
  SnsCertificateCache,
  SnsFormatError,
  snsHostRegion,
  topicArnRegion,
  verifySnsMessage,
  type TextFetcher,
} from './verify/sns.js';
import { precheckSvix, svixKey, verifySvix } from './verify/svix.js';

/** Group commit of MTA events: transactions in flight, events and bytes per transaction. */
const MTA_EVENT_BATCH = { maxInFlight: 2, maxItems: 200, maxBytes: 4 * 1024 * 1024 };

/**
 * Body limits per route: Mandrill batches up to 1000 events. The MTA's two routes carry
 * inbound messages and follow its inbound size limit (policy.ts, inboundBodyLimits).
 */
export const BODY_LIMITS = {
  ses: 512 * 1024,
  resend: 1024 * 1024,
  mandrill: 5 * 1024 * 1024,
  relay: 1024 * 1024,
} as const;

export interface WebhookOptions {
  /** Fetches SNS signing certificates (PEM). Default: https GET, no redirects, 10 s, 64 KiB. */
  snsCertificateFetch?: TextFetcher;
  /** Confirms an SNS subscription by GETting its SubscribeURL. Default: the same https GET. */
  snsConfirmFetch?: TextFetcher;
  /**
   * Checks SNS certificates' validity period. Always true in production; only tests that pin
   * Amazon's real (expired) sample certificates turn it off.
   */
  snsCheckCertExpiry?: boolean;
}

export interface WebhookDeps extends PipelineDeps {
  config: Config;
  clock: Clock;
  log: Logger;
}

const ok = (r: { applied: number; duplicates: number }) => ({ success: true as const, applied: r.applied, duplicates: r.duplicates });
const IGNORED = { success: true as const, ignored: true as const };

function notConfigured(name: string): AppError {
  return unavailable(`This webhook route is not configured: ${name} is not set`, 'webhook_not_configured');
}

/** VerificationError → 401, format errors → 400; anything else propagates (500, logged). */
function mapError(err: unknown): unknown {
  if (err instanceof VerificationError) return unauthenticated(err.message, err.reason);
  if (err instanceof FeedbackFormatError || err instanceof SnsFormatError) return badInput(err.message, 'invalid_payload');
  return err;
}

export function feedbackWebhookRoutes(app: HttpApp, deps: WebhookDeps, opts: WebhookOptions = {}): void {
  const { config, clock, log } = deps;
  const certs = new SnsCertificateCache({ fetch: opts.snsCertificateFetch ?? httpsTextFetcher, clock });
  const confirmFetch = opts.snsConfirmFetch ?? httpsTextFetcher;
  const checkCertExpiry = opts.snsCheckCertExpiry ?? true;
  if (config.NODE_ENV === 'production' && !checkCertExpiry) throw new Error('snsCheckCertExpiry cannot be turned off in production');

  // Fail closed, before the body is read: an unset secret means nothing is verified.
  const requireSecret = (name: keyof Config, valid = true) => {
    const usable = Boolean(config[name]) && valid;
    return async (_req: FastifyRequest, _reply: FastifyReply) => {
      if (!usable) throw notConfigured(name);
    };
  };
  const resendKeyValid = (() => {
    try {
      svixKey(config.RESEND_WEBHOOK_SECRET!);
      return true;
    } catch {
      return false;
    }
  })();

  const apply = async (t: Translation, reply: FastifyReply, run = (events: FeedbackEvent[]) => applyFeedback(deps, events)) => {
    if (t.ignored !== undefined) return reply.code(200).send(IGNORED);
    return reply.code(200).send(ok(await run(t.events)));
  };
  // The MTA posts an event per delivered message (those of one event-loop turn together, as an
  // array: src/mta/notifier.ts): concurrent posts share one transaction
  // (group commit); each is answered after it committed. A failed batch is retried request
  // by request, so one bad event does not fail the others.
  const mtaBatch = new Batcher<FeedbackEvent[], ApplyResult>((groups) => applyFeedbackGroups(deps, groups), MTA_EVENT_BATCH, () => true);
  app.addHook('onClose', async () => mtaBatch.drain());

  // Cheap checks before a body is read: the signature headers and the timestamp, then room
  // in the budget of bodies being received (a forged header costs nothing to send).
  const inbound = inboundBodyLimits(config.INBOUND_MAX_MESSAGE_MB);
  const budget = new BodyBudget(inbound.budget);
  const precheck = (check: (headers: HeaderBag, nowMs: number) => void) =>
    async (req: FastifyRequest) => check(req.raw.headersDistinct, clock.now());

  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    // The app's envelope handler answers, so an AppError keeps its headers (the busy 503's
    // Retry-After) and an answer before the body closes the connection.
    scope.setErrorHandler((err) => {
      throw mapError(err);
    });
    const raw = (req: FastifyRequest): Buffer => (Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));

    const signed = (secret: ReturnType<typeof requireSecret>, check: Parameters<typeof precheck>[0]) => [secret, precheck(check), budget.reserve];
    const mtaSigned = signed(requireSecret('MTA_WEBHOOK_SECRET'), (h, now) => precheckTimestamped(MTA_SCHEME, h, now));
    scope.post('/webhooks/mta', { bodyLimit: inbound.mta, onRequest: mtaSigned }, async (req, reply) => {
      const body = raw(req);
      const now = clock.now();
      verifyTimestampedHmac(MTA_SCHEME, { secret: config.MTA_WEBHOOK_SECRET!, body, headers: req.raw.headersDistinct, nowMs: now });
      return apply(translateMta(body, now), reply, (events) => mtaBatch.submit(events, body.length));
    });

    // Personal-mailbox mail (src/backend/mailboxes): signed like the events, stored once per delivery id.
    scope.post('/webhooks/mta-mailbox', { bodyLimit: inbound.mailbox, onRequest: mtaSigned }, async (req, reply) => {
      const body = raw(req);
      const now = clock.now();
      verifyTimestampedHmac(MTA_SCHEME, { secret: config.MTA_WEBHOOK_SECRET!, body, headers: req.raw.headersDistinct, nowMs: now });
      const { delivery, raw: message } = parseDelivery(body);
      const data = await storeDelivery(deps.db, now, delivery, message);
      log.info({ deliveryId: delivery.id, mailboxId: delivery.mailboxId, bytes: message.length, ...data }, data.stored ? 'mailbox message stored' : 'mailbox delivery already stored');
      return reply.code(200).send({ data });
    });

    scope.post('/webhooks/relay', { bodyLimit: BODY_LIMITS.relay, onRequest: signed(requireSecret('RELAY_WEBHOOK_SECRET'), (h, now) => precheckTimestamped(RELAY_SCHEME, h, now)) }, async (req, reply) => {
      const body = raw(req);
      const now = clock.now();
      verifyTimestampedHmac(RELAY_SCHEME, { secret: config.RELAY_WEBHOOK_SECRET!, body, headers: req.raw.headersDistinct, nowMs: now });
      return apply(translateRelay(body, now), reply);
    });

    scope.post(
      '/webhooks/resend',
      { bodyLimit: BODY_LIMITS.resend, onRequest: signed(requireSecret('RESEND_WEBHOOK_SECRET', resendKeyValid), precheckSvix) },
      async (req, reply) => {
        const body = raw(req);
        const now = clock.now();
        const { id } = verifySvix({ secret: config.RESEND_WEBHOOK_SECRET!, body, headers: req.raw.headersDistinct, nowMs: now });
        return apply(translateResend(body, id, now), reply);
      },
    );

    // Mandrill checks a new webhook URL with HEAD (and may POST an empty batch) before it
    // shows the key: both succeed and do nothing, even while the key is not configured yet.
    scope.head('/webhooks/mandrill', async (_req, reply) => reply.code(200).send());
    // Mandrill's signature covers the form fields and SNS's is inside the body: only the budget applies before it.
    scope.post('/webhooks/mandrill', { bodyLimit: BODY_LIMITS.mandrill, onRequest: budget.reserve }, async (req, reply) => {
      const body = raw(req);
      const fields = parseFormFields(body);
      const batch = fields.get('mandrill_events');
      if (body.length === 0 || batch === undefined || batch.trim() === '[]') return reply.code(200).send(IGNORED);
      if (!config.MANDRILL_WEBHOOK_KEY) throw notConfigured('MANDRILL_WEBHOOK_KEY');
      const url = config.MANDRILL_WEBHOOK_URL ?? `${config.BASE_URL}/webhooks/mandrill`;
      verifyMandrill({ key: config.MANDRILL_WEBHOOK_KEY, url, fields, headers: req.raw.headersDistinct });
      const now = clock.now();
      const events = parseMandrillEvents(fields);
      // Mandrill's signature covers no time; the newest event's `ts` stands in for it.
      const ts = mandrillBatchTime(events);
      if (ts === null) throw new VerificationError('missing_timestamp', 'Mandrill events carry no ts');
      checkTolerance(ts * 1000, now);
      return apply(translateMandrill(events, now), reply);
    });

    scope.post('/webhooks/ses', { bodyLimit: BODY_LIMITS.ses, onRequest: [requireSecret('SES_SNS_TOPIC_ARNS', (config.SES_SNS_TOPIC_ARNS?.length ?? 0) > 0), budget.reserve] }, async (req, reply) => {
      const body = raw(req);
      const now = clock.now();
      const msg = parseSnsMessage(body);
      const headerType = req.headers['x-amz-sns-message-type'];
      if (typeof headerType === 'string' && headerType !== msg.Type) throw badInput('x-amz-sns-message-type does not match the message Type', 'invalid_payload');
      await verifySnsMessage(msg, { certs, nowMs: now, checkCertExpiry });
      // Amazon signed it; now it must be one of our topics (anyone can create an SNS topic).
      const region = topicArnRegion(msg.TopicArn);
      if (!config.SES_SNS_TOPIC_ARNS!.includes(msg.TopicArn) || region === null || region !== snsCertUrlRegion(msg.SigningCertURL)) {
        log.warn({ topicArn: msg.TopicArn }, 'SNS message from a topic not listed in SES_SNS_TOPIC_ARNS refused');
        throw forbidden('This SNS topic is not accepted here (SES_SNS_TOPIC_ARNS)', 'untrusted_topic');
      }
      switch (msg.Type) {
        case 'SubscriptionConfirmation': {
          const url = msg.SubscribeURL!;
          if (snsHostRegion(url) !== region) throw forbidden('SubscribeURL is not an Amazon SNS URL of the topic\'s region', 'untrusted_subscribe_url');
          try {
            await confirmFetch(url);
          } catch (err) {
            log.error({ err, topicArn: msg.TopicArn }, 'SNS subscription confirmation failed');
            throw unavailable('Could not confirm the SNS subscription; SNS will retry', 'subscription_confirmation_failed');
          }
          log.info({ topicArn: msg.TopicArn }, 'SNS subscription confirmed');
          return reply.code(200).send({ success: true, confirmed: true });
        }
        case 'UnsubscribeConfirmation':
          log.warn({ topicArn: msg.TopicArn }, 'SNS reports this endpoint unsubscribed from the topic; SES feedback will stop');
          return reply.code(200).send(IGNORED);
        default:
          return apply(translateSes(msg.Message, msg.MessageId, now), reply);
      }
    });
  });
}
