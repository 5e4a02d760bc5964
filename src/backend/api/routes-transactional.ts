/**
 * POST /api/v1/transactional (transactional:send), shaped like Resend's send-email API in
 * the REST API's camelCase: to, from, subject, html and/or text, replyTo, headers, or a
 * stored template (`templateId`, issue 4's templates) with `variables`. One recipient per
 * request. Answered 202 `{ data: { id, status } }` once the provider accepted the message.
 * Provider resolution per mta.md: EMAIL_PROVIDER unset → 503, nothing recorded.
 */
import { Type, type Static } from '@sinclair/typebox';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { formatMailbox, parseMailbox } from '../../shared/mail/address.js';
import { isHeaderName, isReservedHeader, withoutCfbl } from '../../shared/mail/headers.js';
import type { ApiDeps } from './deps.js';
import { idempotencyKey, requestHash } from './idempotency.js';
import { TRANSACTIONAL } from './policy.js';
import { API_ERRORS, errors } from './schemas.js';
import { hasVariable, referencedVariables, render, type Variables } from './template.js';

const Address = Type.String({ minLength: 3, maxLength: 512 });
const VariableValue = Type.Union([Type.String({ maxLength: 10_000 }), Type.Number(), Type.Boolean(), Type.Null()]);
const TransactionalBody = Type.Object(
  {
    to: Type.Union([Address, Type.Array(Address, { minItems: 1, maxItems: 1 })], { description: 'One recipient (a one-element array is accepted)' }),
    from: Type.String({ minLength: 3, maxLength: 512, description: '`a@example.com` or `Name <a@example.com>`; the domain is the DKIM signing domain' }),
    subject: Type.Optional(Type.String({ minLength: 1, maxLength: TRANSACTIONAL.maxSubjectLength, description: 'Required unless the template has one' })),
    html: Type.Optional(Type.String({ maxLength: TRANSACTIONAL.maxHtmlBytes })),
    text: Type.Optional(Type.String({ maxLength: TRANSACTIONAL.maxTextBytes })),
    templateId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'A stored template (admin API) instead of html/text' })),
    variables: Type.Optional(
      Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_.-]{0,99}$' }), VariableValue, {
        maxProperties: TRANSACTIONAL.maxVariables,
        description: 'Values for {{ name }} placeholders in subject, html and text (escaped in html)',
      }),
    ),
    replyTo: Type.Optional(Type.String({ minLength: 3, maxLength: 512 })),
    headers: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 998 }), { maxProperties: TRANSACTIONAL.maxHeaders })),
  },
  { additionalProperties: false },
);
const Accepted = Type.Object({
  data: Type.Object({
    id: Type.String({ description: 'The email send id (es_...)' }),
    status: Type.String({ description: '`accepted` once the provider took it; later moved by delivery feedback' }),
  }),
});

export function transactionalRoutes(app: HttpApp, d: ApiDeps): void {
  app.post(
    '/api/v1/transactional',
    {
      config: { scope: 'transactional:send' },
      bodyLimit: TRANSACTIONAL.maxHtmlBytes + TRANSACTIONAL.maxTextBytes + 256 * 1024,
      schema: {
        tags: ['transactional'],
        security: [{ apiKey: [] }],
        summary: 'Send a transactional email',
        headers: Type.Object({ 'idempotency-key': Type.Optional(Type.String({ description: 'Same key and body: the first send id is returned and nothing is sent again' })) }),
        body: TransactionalBody,
        response: { 202: Accepted, ...errors(...API_ERRORS, 404, 409, 503) },
      },
    },
    async (req, reply) => {
      const b = req.body as Static<typeof TransactionalBody>;
      const key = idempotencyKey(req);
      const toRaw = Array.isArray(b.to) ? b.to[0] : b.to;
      const to = parseMailbox(toRaw);
      if (!to) throw badInput(`Invalid recipient address: ${JSON.stringify(toRaw.slice(0, 100))}`, 'invalid_email');
      const from = parseMailbox(b.from);
      if (!from) throw badInput('Invalid from: use a@example.com or Name <a@example.com>', 'invalid_from');
      const replyTo = b.replyTo === undefined ? undefined : parseMailbox(b.replyTo);
      if (replyTo === null) throw badInput('Invalid replyTo address', 'invalid_email');
      const headers = checkHeaders(b.headers);

      let subject = b.subject;
      let html = b.html;
      const text = b.text;
      if (b.templateId !== undefined) {
        if (html !== undefined || text !== undefined) throw badInput('Give either templateId or html/text, not both', 'validation_error');
        const t = await d.db.query<{ subject: string; html: string }>(`SELECT subject, html FROM templates WHERE id = $1`, [b.templateId]);
        if (!t.rows[0]) throw notFound('Template not found', 'template_not_found');
        subject ??= t.rows[0].subject;
        html = t.rows[0].html;
      }
      if (!subject) throw badInput('subject is required', 'validation_error');
      if (!html && !text) throw badInput('Give html, text or templateId', 'validation_error');
      const vars: Variables = b.variables ?? {};
      const missing = [...referencedVariables(subject, html, text)].filter((n) => !hasVariable(vars, n));
      if (missing.length) throw badInput(`Missing variables: ${missing.join(', ')}`, 'missing_variables');
      subject = render(subject, vars, false);
      if (/[\r\n]/.test(subject)) throw badInput('subject must be a single line', 'validation_error');

      const contact = await d.db.query<{ id: string }>(`SELECT id FROM contacts WHERE lower(email) = lower($1)`, [to.address]);
      const outcome = await d.sender.send({
        type: 'transactional',
        contactId: contact.rows[0]?.id ?? null,
        to: to.address,
        from: formatMailbox(from),
        fromAddress: from.address,
        subject,
        html: html === undefined ? '' : render(html, vars, true),
        text: text === undefined ? undefined : render(text, vars, false),
        replyTo: replyTo ? formatMailbox(replyTo) : undefined,
        headers,
        metadata: b.templateId ? { templateId: b.templateId } : {},
        idempotencyKey: key,
        requestHash: key ? requestHash(b) : undefined,
      });
      reply.code(202);
      return { data: { id: outcome.id, status: outcome.status } };
    },
  );
}

function checkHeaders(h: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!h) return undefined;
  for (const [name, value] of Object.entries(h)) {
    if (!isHeaderName(name)) throw badInput(`Invalid header name: ${JSON.stringify(name.slice(0, 80))}`, 'invalid_header');
    if (isReservedHeader(name)) throw badInput(`Header ${name} cannot be set; use the matching field`, 'reserved_header');
    if (/[\r\n\0]/.test(value)) throw badInput(`Header ${name} must be a single line`, 'invalid_header');
  }
  // A caller's CFBL-* fields are removed, not refused: the MTA writes its own pair (mta.md).
  return withoutCfbl(h);
}
