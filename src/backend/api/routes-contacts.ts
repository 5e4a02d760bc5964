/** /api/v1/contacts: list and search, create, get, partial update, delete. */
import { Type, type Static } from '@sinclair/typebox';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import type { ApiDeps } from './deps.js';
import { deleteContact, findContact, insertContact, updateContact, type Contact } from './contacts.js';
import { listContacts } from './contact-list.js';
import { CONTACT_LIST } from './policy.js';
import { API_ERRORS, ContactRef, errors } from './schemas.js';

const Name = Type.Union([Type.String({ maxLength: 200 }), Type.Null()], { description: 'Empty string or null clears the field' });
const CreateBody = Type.Object(
  {
    email: Type.String({ minLength: 1, maxLength: 320, description: 'Validated and normalized (see docs/api.md); unique case-insensitively' }),
    firstName: Type.Optional(Name),
    lastName: Type.Optional(Name),
  },
  { additionalProperties: false },
);
const UpdateBody = Type.Object(
  {
    email: Type.Optional(Type.String({ minLength: 1, maxLength: 320 })),
    firstName: Type.Optional(Name),
    lastName: Type.Optional(Name),
  },
  { additionalProperties: false, description: 'Partial update: only the fields present change' },
);
const IdParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 320, description: 'A contact id or a URL-encoded email address' }),
});
const ListQuery = Type.Object(
  {
    limit: Type.Integer({
      minimum: 1,
      maximum: CONTACT_LIST.maxLimit,
      default: CONTACT_LIST.defaultLimit,
      description: `Page size, 1 to ${CONTACT_LIST.maxLimit} (default ${CONTACT_LIST.defaultLimit}); above ${CONTACT_LIST.maxLimit} is a 400`,
    }),
    cursor: Type.Optional(Type.String({ minLength: 1, maxLength: 2048, description: 'pagination.cursor of the previous page; omit for the first page' })),
    search: Type.Optional(
      Type.String({ maxLength: 1000, description: 'Search over email and names, relevance-ordered; empty means no search' }),
    ),
  },
  { additionalProperties: false },
);
const One = Type.Object({ data: ContactRef });
const Deleted = Type.Object({
  data: Type.Object({ id: Type.String(), email: Type.String(), deleted: Type.Literal(true) }),
});

/** '' and null both clear a name; names are stored trimmed. */
const cleanName = (v: string | null | undefined) => (v === undefined ? undefined : v === null || v.trim() === '' ? null : v.trim());

function validEmail(raw: string): string {
  const email = normalizeAddress(raw);
  if (!email) throw badInput(`Invalid email address: ${JSON.stringify(raw.slice(0, 100))}`, 'invalid_email');
  return email;
}

const duplicate = (email: string) => conflict(`A contact with the email ${email} already exists`, 'duplicate_email');
const missing = () => notFound('Contact not found', 'contact_not_found');

export function contactRoutes(app: HttpApp, d: ApiDeps): void {
  const tags = ['contacts'];
  const security = [{ apiKey: [] }];

  app.get(
    '/api/v1/contacts',
    {
      config: { scope: 'contacts:read' },
      schema: {
        tags,
        security,
        summary: 'List or search contacts',
        description: 'Newest first, or by relevance with `search`. Walk pages by passing `pagination.cursor` back until `isDone`.',
        querystring: ListQuery,
        response: { 200: Type.Object({ data: Type.Array(ContactRef), pagination: Type.Ref('Pagination') }), ...errors(...API_ERRORS) },
      },
    },
    async (req) => {
      const q = req.query as Static<typeof ListQuery>;
      return listContacts(d.db, await d.signer(), q, d.clock.now());
    },
  );

  app.post(
    '/api/v1/contacts',
    {
      config: { scope: 'contacts:write' },
      schema: {
        tags,
        security,
        summary: 'Create a contact',
        body: CreateBody,
        response: { 201: One, ...errors(...API_ERRORS, 409) },
      },
    },
    async (req, reply) => {
      const b = req.body as Static<typeof CreateBody>;
      const email = validEmail(b.email);
      const contact = await insertContact(d.db, { email, firstName: cleanName(b.firstName), lastName: cleanName(b.lastName), source: 'api' }, d.clock.now());
      if (!contact) throw duplicate(email);
      await d.emitContactCreated(contact, null);
      reply.code(201);
      return { data: contact };
    },
  );

  app.get(
    '/api/v1/contacts/:id',
    {
      config: { scope: 'contacts:read' },
      schema: { tags, security, summary: 'Get a contact by id or email', params: IdParams, response: { 200: One, ...errors(...API_ERRORS, 404) } },
    },
    async (req) => {
      const contact = await findContact(d.db, (req.params as Static<typeof IdParams>).id);
      if (!contact) throw missing();
      return { data: contact };
    },
  );

  app.put(
    '/api/v1/contacts/:id',
    {
      config: { scope: 'contacts:write' },
      schema: {
        tags,
        security,
        summary: 'Update a contact (partial)',
        params: IdParams,
        body: UpdateBody,
        response: { 200: One, ...errors(...API_ERRORS, 404, 409) },
      },
    },
    async (req) => {
      const b = req.body as Static<typeof UpdateBody>;
      const email = b.email === undefined ? undefined : validEmail(b.email);
      const existing: Contact | null = await findContact(d.db, (req.params as Static<typeof IdParams>).id);
      if (!existing) throw missing();
      const updated = await updateContact(d.db, existing.id, { email, firstName: cleanName(b.firstName), lastName: cleanName(b.lastName) }, d.clock.now());
      if (updated === 'duplicate') throw duplicate(email!);
      if (!updated) throw missing();
      return { data: updated };
    },
  );

  app.delete(
    '/api/v1/contacts/:id',
    {
      config: { scope: 'contacts:write' },
      schema: {
        tags,
        security,
        summary: 'Delete a contact',
        description: 'Deletes the contact with its topic memberships and events; past email sends keep the address and lose the link.',
        params: IdParams,
        response: { 200: Deleted, ...errors(...API_ERRORS, 404) },
      },
    },
    async (req) => {
      const contact = await findContact(d.db, (req.params as Static<typeof IdParams>).id);
      if (!contact || !(await deleteContact(d.db, contact.id))) throw missing();
      return { data: { id: contact.id, email: contact.email, deleted: true as const } };
    },
  );
}
