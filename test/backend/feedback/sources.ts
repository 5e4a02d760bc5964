/** A hard bounce about one provider message, signed as each of the five sources signs it. */
import { Webhook } from 'svix';
import { mtaEvent } from '../../harness/mta-events.js';
import { NOW, NOW_S, SECRETS } from './app.js';
import { fixture, hexHmac, mandrillBody, mandrillSignature, signSns, TEST_TOPIC } from './helpers.js';

export const MANDRILL_URL = 'https://mail.lettermill.test/webhooks/mandrill';
export interface Req {
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** Each source's hard bounce for `to`, about the provider message `pmid`. */
export const SOURCES: { name: string; request(to: string, pmid: string): Req }[] = [
  {
    name: 'mta',
    request(to, pmid) {
      const body = JSON.stringify(mtaEvent('bounced', { messageId: pmid, recipient: to, type: 'hard', reason: 'userunknown', smtpResponse: '550 5.1.1 user unknown' }, { id: `mevt_${pmid}`, at: NOW - 2000 }));
      return { path: '/webhooks/mta', body, headers: { 'content-type': 'application/json', 'x-mta-timestamp': String(NOW_S), 'x-mta-signature': hexHmac(SECRETS.MTA_WEBHOOK_SECRET, NOW_S, body) } };
    },
  },
  {
    name: 'ses',
    request(to, pmid) {
      const n = JSON.parse(fixture('feedback/ses-bounce-permanent.json').toString());
      n.bounce.bouncedRecipients[0].emailAddress = to;
      n.mail.messageId = pmid;
      n.mail.destination = [to];
      const msg = signSns({ Type: 'Notification', MessageId: `sns-${pmid}`, TopicArn: TEST_TOPIC, Message: JSON.stringify(n), Timestamp: new Date(NOW - 3000).toISOString() });
      return { path: '/webhooks/ses', body: JSON.stringify(msg), headers: { 'content-type': 'text/plain; charset=UTF-8', 'x-amz-sns-message-type': 'Notification' } };
    },
  },
  {
    name: 'resend',
    request(to, pmid) {
      const e = JSON.parse(fixture('feedback/resend-bounced.json').toString());
      e.data.email_id = pmid;
      e.data.to = [to];
      const body = JSON.stringify(e);
      const id = `msg_${pmid}`;
      return {
        path: '/webhooks/resend',
        body,
        headers: { 'content-type': 'application/json', 'svix-id': id, 'svix-timestamp': String(NOW_S), 'svix-signature': new Webhook(SECRETS.RESEND_WEBHOOK_SECRET).sign(id, new Date(NOW), body) },
      };
    },
  },
  {
    name: 'mandrill',
    request(to, pmid) {
      const events = JSON.parse(fixture('feedback/mandrill-events.json').toString()).slice(0, 1);
      events[0]._id = pmid;
      events[0].msg._id = pmid;
      events[0].msg.email = to;
      const { body, fields } = mandrillBody(events);
      return { path: '/webhooks/mandrill', body, headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-mandrill-signature': mandrillSignature(SECRETS.MANDRILL_WEBHOOK_KEY, MANDRILL_URL, fields) } };
    },
  },
  {
    name: 'relay',
    request(to, pmid) {
      const body = JSON.stringify({ id: `rel-${pmid}`, event: 'bounced', timestamp: new Date(NOW - 1000).toISOString(), messageId: pmid, recipient: to, bounce: { type: 'hard', reason: 'userunknown', diagnostic: '550 5.1.1 user unknown' } });
      return { path: '/webhooks/relay', body, headers: { 'content-type': 'application/json', 'x-relay-timestamp': String(NOW_S), 'x-relay-signature': hexHmac(SECRETS.RELAY_WEBHOOK_SECRET, NOW_S, body) } };
    },
  },
];

