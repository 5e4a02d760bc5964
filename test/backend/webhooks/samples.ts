/** One realistic `data` per event (also the examples in docs/webhooks.md). */
import type { WebhookEventMap, WebhookEventName } from '../../../src/backend/webhooks/catalog.js';

const email = {
  emailId: 'es_01jabcd0000000000000000001',
  messageId: '<es_01jabcd0000000000000000001@mail.acme.test>',
  to: 'ada@example.com',
  from: 'Acme <news@acme.test>',
  subject: 'March product update',
  contactId: 'ct_01jabcd0000000000000000001',
  type: 'campaign' as const,
  campaignId: 'cmp_01jabcd000000000000000001',
};

export const SAMPLES: { [K in WebhookEventName]: WebhookEventMap[K] } = {
  'email.sent': { ...email, sentAt: '2026-01-01T11:59:58.120Z' },
  'email.delivered': { ...email, deliveredAt: '2026-01-01T11:59:59.003Z', smtpResponse: '250 2.0.0 OK 1735732799 q12si' },
  'email.opened': { ...email, openedAt: '2026-01-01T12:04:10.500Z', userAgent: 'Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X)' },
  'email.clicked': { ...email, clickedAt: '2026-01-01T12:04:31.007Z', url: 'https://acme.test/pricing?utm_source=lettermill', userAgent: null },
  'email.bounced': {
    ...email,
    type: 'transactional',
    campaignId: null,
    bouncedAt: '2026-01-01T12:00:02.440Z',
    bounce: { type: 'hard', reason: 'userunknown', status: '5.1.1', diagnostic: "550 5.1.1 The email account that you tried to reach does not exist" },
  },
  'email.complained': { ...email, complainedAt: '2026-01-02T08:30:00.000Z', feedbackType: 'abuse' },
  'contact.created': {
    id: 'ct_01jabcd0000000000000000001',
    email: 'ada@example.com',
    firstName: 'Ada',
    lastName: 'Lovelace',
    source: 'form',
    formId: 'frm_01jabcd00000000000000001',
    createdAt: '2026-01-01T11:00:00.000Z',
    updatedAt: '2026-01-01T11:00:00.000Z',
  },
  'topic.unsubscribed': {
    contactId: 'ct_01jabcd0000000000000000001',
    email: 'ada@example.com',
    topicId: 'tp_01jabcd000000000000000001',
    topicName: 'Product updates',
    source: 'one_click',
    emailId: email.emailId,
    campaignId: email.campaignId,
    unsubscribedAt: '2026-01-01T12:10:00.000Z',
  },
};
