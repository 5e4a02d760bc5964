/**
 * POST /admin/templates/:id/test-send: one copy of a template to one address, as a
 * transactional send (the template's subject marked "[Test]"), through the same provider
 * route and email_sends record as any send, so it shows in the transactional log.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { Db } from '../../shared/db/pool.js';
import { badInput, notFound } from '../../shared/errors.js';
import type { HttpApp } from '../../shared/http.js';
import { normalizeAddress, parseMailbox } from '../../shared/mail/address.js';
import type { AdminGuard } from '../api/admin-auth.js';
import type { SendService } from '../api/sending/send.js';

const Body = Type.Object(
  { to: Type.String({ minLength: 3, maxLength: 320 }), from: Type.String({ minLength: 3, maxLength: 512 }) },
  { additionalProperties: false },
);
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

export function testSendRoute(app: HttpApp, d: { db: Db; guard: AdminGuard; sender: SendService }): void {
  app.post('/admin/templates/:id/test-send', { onRequest: d.guard, schema: { params: IdParams, body: Body } }, async (req, reply) => {
    const { id } = req.params as Static<typeof IdParams>;
    const b = req.body as Static<typeof Body>;
    const to = normalizeAddress(b.to);
    if (!to) throw badInput(`Invalid recipient address: ${JSON.stringify(b.to.slice(0, 100))}`, 'invalid_email');
    const from = parseMailbox(b.from);
    if (!from) throw badInput('from must be an address or "Name <address>"', 'validation_error');
    const t = (await d.db.query<{ subject: string; html: string }>('SELECT subject, html FROM templates WHERE id = $1', [id])).rows[0];
    if (!t) throw notFound('Template not found', 'template_not_found');
    const out = await d.sender.send({
      type: 'transactional',
      contactId: null,
      to,
      from: b.from.trim(),
      fromAddress: from.address,
      subject: `[Test] ${t.subject}`,
      html: t.html,
      metadata: { purpose: 'template_test', templateId: id },
    });
    return reply.code(202).send({ data: { id: out.id, status: out.status } });
  });
}
