/**
 * POST /api/v1/events (events:write), shaped like Loops' events API: a named event for a
 * contact, by email or id, with flat properties. An unknown email creates the contact
 * (source `api`, contact.created emitted) as Loops does; an unknown contactId is a 404.
 * Stored in contact_events for automations. Idempotency-Key: the same key and request
 * return the first event; a different request with the key is a 409.
 */
import { Type, type Static } from '@sinclair/typebox';
import { toIso } from '../../shared/clock.js';
import { newId } from '../../shared/crypto.js';
import { tx } from '../../shared/db/pool.js';
import { AppError, badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import { findContact, insertContact, type Contact } from './contacts.js';
import type { ApiDeps } from './deps.js';
import { idempotencyKey, requestHash } from './idempotency.js';
import { EVENTS } from './policy.js';
import { API_ERRORS, errors } from './schemas.js';

const PropertyValue = Type.Union([Type.String({ maxLength: EVENTS.maxStringValueLength }), Type.Number(), Type.Boolean(), Type.Null()]);
const EventBody = Type.Object(
  {
    email: Type.Optional(Type.String({ minLength: 1, maxLength: 320, description: 'The contact by email (created when unknown)' })),
    contactId: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'The contact by id' })),
    eventName: Type.String({ minLength: 1, maxLength: EVENTS.maxNameLength, pattern: '\\S' }),
    eventProperties: Type.Optional(
      Type.Record(Type.String({ minLength: 1, maxLength: EVENTS.maxPropertyKeyLength }), PropertyValue, {
        maxProperties: EVENTS.maxProperties,
        description: 'Flat properties: string, number, boolean or null values',
      }),
    ),
  },
  { additionalProperties: false, description: 'Exactly one of email or contactId' },
);
const EventAccepted = Type.Object({
  data: Type.Object({
    id: Type.String({ description: 'Event id (ev_...)' }),
    contactId: Type.String(),
    eventName: Type.String(),
    createdAt: Type.String({ format: 'date-time' }),
  }),
});

interface EventRow {
  id: string;
  contact_id: string;
  name: string;
  created_at: Date;
  request_hash: string | null;
}

const out = (r: EventRow) => ({ data: { id: r.id, contactId: r.contact_id, eventName: r.name, createdAt: toIso(r.created_at) } });

export function eventRoutes(app: HttpApp, d: ApiDeps): void {
  app.post(
    '/api/v1/events',
    {
      config: { scope: 'events:write' },
      bodyLimit: 256 * 1024,
      schema: {
        tags: ['events'],
        security: [{ apiKey: [] }],
        summary: 'Record an event for a contact',
        headers: Type.Object({ 'idempotency-key': Type.Optional(Type.String({ description: 'Same key and body: the first event is returned, nothing is recorded again' })) }),
        body: EventBody,
        response: { 202: EventAccepted, ...errors(...API_ERRORS, 404, 409) },
      },
    },
    async (req, reply) => {
      const b = req.body as Static<typeof EventBody>;
      if ((b.email === undefined) === (b.contactId === undefined)) throw badInput('Give exactly one of email or contactId', 'validation_error');
      const key = idempotencyKey(req);
      const hash = requestHash(b);
      let email: string | undefined;
      if (b.email !== undefined) {
        email = normalizeAddress(b.email) ?? undefined;
        if (!email) throw badInput(`Invalid email address: ${JSON.stringify(b.email.slice(0, 100))}`, 'invalid_email');
      }
      const replay = async (): Promise<ReturnType<typeof out> | null> => {
        if (!key) return null;
        const r = await d.db.query<EventRow>(`SELECT id, contact_id, name, created_at, request_hash FROM contact_events WHERE idempotency_key = $1`, [key]);
        const row = r.rows[0];
        if (!row) return null;
        if (row.request_hash !== hash) throw conflict('This Idempotency-Key was already used with a different request', 'idempotency_key_reused');
        return out(row);
      };
      const earlier = await replay();
      if (earlier) {
        reply.code(202);
        return earlier;
      }

      const now = d.clock.now();
      let created: Contact | null = null;
      const row = await tx(d.db, async (c) => {
        let contact = await findContact(c, email ?? b.contactId!);
        if (!contact && email) {
          created = await insertContact(c, { email, source: 'api' }, now);
          // null: a concurrent request created it first; this statement sees its commit.
          contact = created ?? (await findContact(c, email));
        }
        if (!contact) throw notFound('Contact not found', 'contact_not_found');
        const r = await c.query<EventRow>(
          `INSERT INTO contact_events (id, contact_id, name, properties, idempotency_key, request_hash, created_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (idempotency_key) DO NOTHING
           RETURNING id, contact_id, name, created_at, request_hash`,
          [newId('ev', now), contact.id, b.eventName, JSON.stringify(b.eventProperties ?? {}), key ?? null, key ? hash : null, new Date(now)],
        );
        return r.rows[0] ?? null;
      }).catch(async (err) => {
        // Another request inserted the same contact between our read and write: use it.
        if ((err as { code?: string }).code === '23505') return null;
        throw err;
      });
      reply.code(202);
      if (row) {
        if (created) await d.emitContactCreated(created, null);
        return out(row);
      }
      // Lost a race on the idempotency key (or the contact): answer as the winner did.
      const winner = await replay();
      if (winner) return winner;
      throw new AppError('conflict', 'A concurrent request changed the contact; retry', { reason: 'concurrent_update' });
    },
  );
}
