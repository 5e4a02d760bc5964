/**
 * Admin routes of personal mailboxes (Bearer ADMIN_TOKEN): create, list, read, delete a
 * mailbox (each create and delete tells the MTA's cache, best effort), push its cache entry
 * again, and read what the MTA delivered to it.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Clock } from '../../shared/clock.js';
import type { Config } from '../../shared/config.js';
import { newId } from '../../shared/crypto.js';
import type { Db } from '../../shared/db/pool.js';
import { badInput, conflict, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import type { Logger } from '../../shared/log.js';
import { normalizeAddress } from '../../shared/mail/address.js';
import { adminGuard } from '../api/admin-auth.js';
import { attachmentDisposition, page } from '../feedback/admin.js';
import type { MtaMailboxCache } from './mta-cache.js';
import { MAILBOXES } from './policy.js';
import { mailboxOut, type MailboxRow } from './store.js';

export interface MailboxDeps {
  config: Pick<Config, 'ADMIN_TOKEN' | 'ORGANIZATION_ID'>;
  db: Db;
  clock: Clock;
  log: Logger;
  cache: MtaMailboxCache;
}

const CreateBody = Type.Object(
  {
    address: Type.String({ minLength: 3, maxLength: 254 }),
    /** Bytes the mailbox may hold; absent: no quota. */
    quotaBytes: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
    organizationId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });
const MessageParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }), mid: Type.String({ minLength: 1, maxLength: 100 }) });
const PageQuery = Type.Object(
  { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 25 })), cursor: Type.Optional(Type.String({ maxLength: 200 })) },
  { additionalProperties: false },
);

const COLS = 'id, organization_id, address, quota_bytes, used_bytes, created_at';
const MESSAGE_COLS = 'id, delivery_id, address, envelope_from, from_header, subject, authentication, raw_size, octet_length(raw) AS stored_bytes, received_at';

const messageOut = (mailboxId: string, r: any) => ({
  id: r.id,
  deliveryId: r.delivery_id,
  address: r.address,
  envelopeFrom: r.envelope_from,
  from: r.from_header,
  subject: r.subject,
  authentication: r.authentication,
  rawSize: Number(r.raw_size),
  storedBytes: Number(r.stored_bytes),
  receivedAt: new Date(r.received_at).toISOString(),
  rawUrl: `/admin/mailboxes/${mailboxId}/messages/${r.id}/raw`,
});

export function mailboxAdminRoutes(app: HttpApp, d: MailboxDeps): void {
  const one = async (id: string): Promise<MailboxRow> => {
    const r = await d.db.query<MailboxRow>(`SELECT ${COLS} FROM mailboxes WHERE id = $1`, [id]);
    if (!r.rows[0]) throw notFound('Mailbox not found', 'mailbox_not_found');
    return r.rows[0];
  };
  const push = (m: MailboxRow) => d.cache.put({ address: m.address, mailboxId: m.id, organizationId: m.organization_id, quotaBytes: m.quota_bytes === null ? null : Number(m.quota_bytes) });

  app.register(async (plain) => {
    const scope = plain.withTypeProvider<TypeBoxTypeProvider>();
    scope.addHook('onRequest', adminGuard(d));

    scope.post('/admin/mailboxes', { schema: { body: CreateBody } }, async (req, reply) => {
      const b = req.body as Static<typeof CreateBody>;
      const address = normalizeAddress(b.address)?.toLowerCase();
      if (!address) throw badInput('address must be an email address', 'invalid_address');
      const now = d.clock.now();
      const r = await d.db.query<MailboxRow>(
        `INSERT INTO mailboxes (id, organization_id, address, quota_bytes, created_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (address) DO NOTHING RETURNING ${COLS}`,
        [newId('mbx', now), b.organizationId ?? d.config.ORGANIZATION_ID, address, b.quotaBytes ?? null, new Date(now)],
      );
      if (!r.rows[0]) throw conflict(`A mailbox for ${address} exists already`, 'mailbox_exists');
      const mtaCache = await push(r.rows[0]);
      reply.code(201);
      return { data: { ...mailboxOut(r.rows[0]), mtaCache } };
    });

    scope.get('/admin/mailboxes', async () => {
      const r = await d.db.query<MailboxRow>(`SELECT ${COLS} FROM mailboxes ORDER BY address LIMIT $1`, [MAILBOXES.listMax]);
      return { data: r.rows.map(mailboxOut) };
    });

    scope.get('/admin/mailboxes/:id', { schema: { params: IdParams } }, async (req) => ({ data: mailboxOut(await one(req.params.id)) }));

    scope.post('/admin/mailboxes/:id/cache', { schema: { params: IdParams } }, async (req) => {
      const m = await one(req.params.id);
      return { data: { ...mailboxOut(m), mtaCache: await push(m) } };
    });

    // Its messages go with it (ON DELETE CASCADE); the MTA then refuses the address at RCPT.
    scope.delete('/admin/mailboxes/:id', { schema: { params: IdParams } }, async (req) => {
      const r = await d.db.query<MailboxRow>(`DELETE FROM mailboxes WHERE id = $1 RETURNING ${COLS}`, [req.params.id]);
      if (!r.rows[0]) throw notFound('Mailbox not found', 'mailbox_not_found');
      const mtaCache = await d.cache.remove(r.rows[0].address);
      d.log.info({ mailboxId: r.rows[0].id, address: r.rows[0].address, mtaCache }, 'mailbox deleted with its messages');
      return { data: { ...mailboxOut(r.rows[0]), deleted: true, mtaCache } };
    });

    scope.get('/admin/mailboxes/:id/messages', { schema: { params: IdParams, querystring: PageQuery } }, async (req) => {
      await one(req.params.id);
      const { rows, pagination } = await page(d.db, 'mailbox_messages', 'received_at', req.query, ['mailbox_id = $1'], [req.params.id], MESSAGE_COLS);
      return { data: rows.map((r) => messageOut(req.params.id, r)), pagination };
    });

    scope.get('/admin/mailboxes/:id/messages/:mid/raw', { schema: { params: MessageParams } }, async (req, reply) => {
      const r = await d.db.query<{ raw: Buffer }>('SELECT raw FROM mailbox_messages WHERE id = $1 AND mailbox_id = $2', [req.params.mid, req.params.id]);
      if (!r.rows[0]) throw notFound('Mailbox message not found', 'mailbox_message_not_found');
      return reply
        .header('content-type', 'message/rfc822')
        .header('content-disposition', attachmentDisposition(`${req.params.mid}.eml`, 'message.eml'))
        .header('x-content-type-options', 'nosniff')
        .send(r.rows[0].raw);
    });
  });
}
