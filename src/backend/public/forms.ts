/**
 * POST /forms/:formId — sign-up form submissions, in the spec's order of rules:
 * - limits before any work: the per-IP rate limit (429) and the 100 KB body limit (400,
 *   refused from Content-Length before the body is read; counted while streaming otherwise);
 * - unknown form 404, inactive form 403;
 * - JSON, urlencoded and multipart bodies become one flat map of fields;
 * - a filled honeypot gets the answer a real submission would get, and nothing is stored;
 * - `email` and the form's required fields are validated (400 validation_error);
 * - double opt-in (form doubleOptIn or topic requireDoubleOptIn): the sign-up waits in
 *   form_signups and a confirmation email is sent; the contact is created or added only on
 *   confirmation (doi.ts). Otherwise the contact is created (source `form`) or found and
 *   added to the topic at once. A submission never moves a confirmed membership back.
 * - success: 200 `{ ok: true, data: { message } }` (+ `confirmationRequired: true` when
 *   pending), or 302 to the form's redirect URL (+ `confirmation=pending`).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type {} from '@fastify/multipart'; // request.isMultipart() / parts() types
import type { Clock } from '../../shared/clock.js';
import { toIso } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { tx } from '../../shared/db/pool.js';
import { AppError, badInput, forbidden, notFound } from '../../shared/errors.js';
import { inputError, type HttpApp } from '../../shared/http.js';
import { findInputFault } from '../../shared/input.js';
import type { Logger } from '../../shared/log.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import type { Signer } from '../../shared/signing.js';
import { findContact, insertContact, type Contact } from '../api/contacts.js';
import { doiConfirmationUrl, doiEmail, systemFrom } from '../api/doi.js';
import { DOUBLE_OPT_IN } from '../api/policy.js';
import type { SendService } from '../api/sending/send.js';
import type { EventBus } from '../events.js';
import { getForm, type FormRow } from './forms-store.js';
import { FORM_LIMITS } from './policy.js';
import type { PublicRateLimiter } from './rate-limit.js';
import { formDoiToken } from './tokens.js';

export interface FormDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  config: Config;
  signer: Signer;
  limiter: PublicRateLimiter;
  sender: SendService;
  events?: EventBus;
}

export const FORM_MESSAGES = {
  subscribed: 'Thanks for subscribing!',
  pending: 'Almost done: check your inbox and click the link to confirm your subscription.',
} as const;

type Fields = Map<string, string>;

const tooLarge = () => badInput(`Request body is larger than ${FORM_LIMITS.maxBodyBytes / 1024} KB`, 'body_too_large');
const invalid = (message: string) => badInput(message, 'validation_error');

/** Field names people use for the same thing, mapped to ours. */
const ALIASES: Record<string, string> = { first_name: 'firstName', firstname: 'firstName', last_name: 'lastName', lastname: 'lastName', 'e-mail': 'email' };
const canonical = (name: string): string => ALIASES[name.toLowerCase()] ?? (name.toLowerCase() === 'email' ? 'email' : name);

function addField(fields: Fields, rawName: string, rawValue: unknown): void {
  const name = rawName.trim();
  if (!name) return;
  if (name.length > FORM_LIMITS.maxFieldNameLength) throw invalid(`Field name too long: ${name.slice(0, 32)}…`);
  let value: string;
  if (rawValue === null || rawValue === undefined) value = '';
  else if (typeof rawValue === 'string') value = rawValue;
  else if (typeof rawValue === 'number' || typeof rawValue === 'boolean') value = String(rawValue);
  else if (Array.isArray(rawValue) && rawValue.every((v) => typeof v === 'string')) value = rawValue.join(', ');
  else throw invalid(`Field ${name} must be a single value`);
  if (value.length > FORM_LIMITS.maxFieldValueLength) throw invalid(`Field ${name} is longer than ${FORM_LIMITS.maxFieldValueLength} characters`);
  // Multipart fields are read here, after the edge's body check (src/shared/input.ts): the same rule.
  const fault = findInputFault({ [name]: value }, 'body');
  if (fault) throw inputError(fault);
  const key = canonical(name);
  fields.set(key, fields.has(key) && value === '' ? fields.get(key)! : value.trim());
  if (fields.size > FORM_LIMITS.maxFields) throw invalid(`At most ${FORM_LIMITS.maxFields} fields are accepted`);
}

/** The body as a flat map, whichever of the three content types it came in. */
async function readFields(req: FastifyRequest): Promise<Fields> {
  const fields: Fields = new Map();
  if (req.isMultipart()) {
    let bytes = 0;
    try {
      for await (const part of req.parts()) {
        if (part.type === 'file') {
          part.file.resume();
          throw invalid('File uploads are not accepted');
        }
        if (part.valueTruncated || part.fieldnameTruncated) throw tooLarge();
        const value = typeof part.value === 'string' ? part.value : String(part.value ?? '');
        bytes += Buffer.byteLength(part.fieldname) + Buffer.byteLength(value);
        if (bytes > FORM_LIMITS.maxBodyBytes) throw tooLarge();
        addField(fields, part.fieldname, value);
      }
    } catch (err) {
      if (err instanceof AppError) throw err;
      const code = (err as { code?: string }).code ?? '';
      if (/LIMIT|TOO_LARGE/i.test(code)) throw tooLarge();
      throw badInput(`The multipart body could not be read: ${(err as Error).message}`, 'invalid_multipart');
    }
    return fields;
  }
  const body = req.body;
  if (body === undefined || body === null || body === '') return fields;
  if (typeof body !== 'object' || Array.isArray(body)) throw invalid('The body must be a set of named fields');
  for (const [k, v] of Object.entries(body as Record<string, unknown>)) addField(fields, k, v);
  return fields;
}

/**
 * The Location of a form's redirect, computed before anything is written: a URL's WHATWG
 * serialization is printable ASCII, so the answer cannot fail after the contact is stored
 * (a stored URL with CR/LF once made it a 500 after the write). Unusable: no redirect.
 */
function redirectLocation(url: string | null, pending: boolean): string | null {
  if (!url) return null;
  try {
    const u = new URL(url);
    if (pending) u.searchParams.set('confirmation', 'pending');
    return u.href;
  } catch {
    return null;
  }
}

export function formRoutes(app: HttpApp, d: FormDeps): void {
  app.post(
    '/forms/:formId',
    {
      bodyLimit: FORM_LIMITS.maxBodyBytes,
      onRequest: async (req) => {
        await d.limiter.take('forms', req);
        const len = Number(req.headers['content-length']);
        if (Number.isFinite(len) && len > FORM_LIMITS.maxBodyBytes) throw tooLarge();
      },
    },
    async (req, reply) => {
      reply.header('cache-control', 'no-store');
      const form = await getForm(d.db, (req.params as { formId: string }).formId);
      if (!form) throw notFound('Form not found', 'form_not_found');
      if (!form.active) throw forbidden('This form is not accepting submissions', 'form_inactive');
      const fields = await readFields(req);
      const topic = form.topic_id
        ? ((await d.db.query<{ id: string; name: string; require_double_opt_in: boolean }>('SELECT id, name, require_double_opt_in FROM topics WHERE id = $1', [form.topic_id])).rows[0] ?? null)
        : null;
      const doubleOptIn = form.double_opt_in || (topic?.require_double_opt_in ?? false);
      const location = redirectLocation(form.redirect_url, doubleOptIn);

      // A bot filled the hidden field: answer as usual, keep nothing.
      if (fields.get(canonical(form.honeypot_field))) {
        req.log.info({ formId: form.id }, 'form honeypot filled; submission discarded');
        return succeed(reply, location, doubleOptIn);
      }

      const rawEmail = fields.get('email') ?? '';
      if (!rawEmail) throw invalid('Missing required field: email');
      const email = normalizeAddress(rawEmail);
      if (!email) throw invalid('Invalid email address');
      for (const name of form.required_fields) {
        if (!fields.get(canonical(name))) throw invalid(`Missing required field: ${name}`);
      }
      const firstName = fields.get('firstName') || null;
      const lastName = fields.get('lastName') || null;
      const extra: Record<string, string> = {};
      for (const [k, v] of fields) if (!['email', 'firstName', 'lastName', canonical(form.honeypot_field)].includes(k)) extra[k] = v;

      if (doubleOptIn) {
        await startDoubleOptIn(d, form, topic, { email, firstName, lastName, extra });
      } else {
        await subscribeNow(d, form, topic, { email, firstName, lastName });
      }
      return succeed(reply, location, doubleOptIn);
    },
  );
}

function succeed(reply: FastifyReply, location: string | null, pending: boolean) {
  if (location) return reply.redirect(location, 302);
  return reply.code(200).send({
    ok: true,
    data: pending ? { message: FORM_MESSAGES.pending, confirmationRequired: true } : { message: FORM_MESSAGES.subscribed },
  });
}

interface Submission {
  email: string;
  firstName: string | null;
  lastName: string | null;
}

async function subscribeNow(d: FormDeps, form: FormRow, topic: { id: string } | null, s: Submission): Promise<void> {
  const now = d.clock.now();
  const created = await tx(d.db, async (c) => {
    let made: Contact | null = null;
    let contact = await findContact(c, s.email, { forUpdate: true });
    if (!contact) {
      made = await insertContact(c, { email: s.email, firstName: s.firstName, lastName: s.lastName, source: 'form' }, now);
      contact = made ?? (await findContact(c, s.email, { forUpdate: true }));
      if (!contact) throw new Error('contact vanished during a form submission');
    }
    if (topic) {
      // Joining again re-activates; confirmed and not_required stay as they are, pending
      // becomes not_required (this form does not ask for confirmation).
      await c.query(
        `INSERT INTO topic_memberships AS m (topic_id, contact_id, doi_status, source, created_at, updated_at)
         VALUES ($1, $2, 'not_required', 'form', $3, $3)
         ON CONFLICT (topic_id, contact_id) DO UPDATE
           SET unsubscribed_at = NULL,
               doi_status = CASE WHEN m.doi_status = 'pending' THEN 'not_required' ELSE m.doi_status END,
               updated_at = EXCLUDED.updated_at`,
        [topic.id, contact.id, toIso(now)],
      );
    }
    return made;
  });
  if (created && d.events) await d.events.emit('contact.created', { ...created, formId: form.id });
}

async function startDoubleOptIn(
  d: FormDeps,
  form: FormRow,
  topic: { id: string; name: string } | null,
  s: Submission & { extra: Record<string, string> },
): Promise<void> {
  await d.sender.provider('transactional', systemFrom(d.config).address); // refuses (503) before anything is written when no provider is configured
  const now = d.clock.now();
  const r = await d.db.query<{ id: string; confirmation_sent_at: Date | null; inserted: boolean }>(
    `INSERT INTO form_signups (id, form_id, topic_id, email, first_name, last_name, fields, status, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8)
     ON CONFLICT (form_id, lower(email)) WHERE status = 'pending' DO UPDATE
       SET topic_id = EXCLUDED.topic_id, email = EXCLUDED.email,
           first_name = COALESCE(EXCLUDED.first_name, form_signups.first_name),
           last_name = COALESCE(EXCLUDED.last_name, form_signups.last_name),
           fields = form_signups.fields || EXCLUDED.fields, updated_at = EXCLUDED.updated_at
     RETURNING id, confirmation_sent_at, (xmax = 0) AS inserted`,
    [newId('fs', now), form.id, topic?.id ?? null, s.email, s.firstName, s.lastName, JSON.stringify(s.extra), toIso(now)],
  );
  const signup = r.rows[0]!;
  // Submitting again re-sends the link, at most every few minutes (no mail bombing).
  if (signup.confirmation_sent_at && now - signup.confirmation_sent_at.getTime() < DOUBLE_OPT_IN.resendAfterMs) return;
  const url = doiConfirmationUrl(d.config.BASE_URL!, formDoiToken(d.signer, signup.id, now));
  const mail = doiEmail({ topicName: topic?.name ?? d.config.ORGANIZATION_NAME, organizationName: d.config.ORGANIZATION_NAME, url });
  const from = systemFrom(d.config);
  try {
    await d.sender.send({
      type: 'transactional',
      contactId: null,
      to: s.email,
      from: from.from,
      fromAddress: from.address,
      subject: mail.subject,
      html: mail.html,
      text: mail.text,
      metadata: { purpose: 'doi_confirmation', formId: form.id, signupId: signup.id, topicId: topic?.id ?? null },
    });
  } catch (err) {
    // The confirmation could not be sent: a fresh sign-up is taken back, so a failed request writes nothing.
    if (signup.inserted) await d.db.query(`DELETE FROM form_signups WHERE id = $1 AND confirmation_sent_at IS NULL`, [signup.id]);
    throw err;
  }
  await d.db.query('UPDATE form_signups SET confirmation_sent_at = $2 WHERE id = $1', [signup.id, toIso(now)]);
}
