import type { Migration } from '../migrate.js';

/**
 * Inbound mail in the backend (issue 18, docs/inbound.md):
 * - feedback_inbox (050) keeps the message as received (`raw`, bounded by the MTA's inbound
 *   limit), its attachments' descriptions, the MTA's authentication results, the route, and
 *   the send a reply answers (send, contact, campaign) with how it was found.
 * - email_sends.message_id is looked up by the In-Reply-To/References of replies.
 * - mailboxes: personal mailboxes (address, quota, bytes used); mailbox_messages: what the
 *   MTA delivered to them (POST /webhooks/mta-mailbox), UNIQUE (delivery_id) so a retried
 *   delivery is stored and counted once.
 */
export const m069: Migration = {
  id: '069_inbox_mailboxes',
  sql: `
    ALTER TABLE feedback_inbox
      ADD COLUMN raw            bytea,
      ADD COLUMN raw_size       bigint,
      ADD COLUMN attachments    jsonb NOT NULL DEFAULT '[]',
      ADD COLUMN authentication jsonb,
      ADD COLUMN route          jsonb,
      ADD COLUMN send_id        text,
      ADD COLUMN contact_id     text,
      ADD COLUMN campaign_id    text,
      ADD COLUMN linked_by      text CHECK (linked_by IN ('in_reply_to', 'references', 'from_address'));
    CREATE INDEX feedback_inbox_contact ON feedback_inbox (contact_id, received_at DESC, id DESC) WHERE contact_id IS NOT NULL;
    CREATE INDEX feedback_inbox_campaign ON feedback_inbox (campaign_id, received_at DESC, id DESC) WHERE campaign_id IS NOT NULL;

    CREATE INDEX email_sends_message_id ON email_sends (lower(message_id)) WHERE message_id IS NOT NULL;

    CREATE TABLE mailboxes (
      id              text PRIMARY KEY,
      organization_id text NOT NULL,
      address         text NOT NULL UNIQUE CHECK (address = lower(address)),
      quota_bytes     bigint CHECK (quota_bytes IS NULL OR quota_bytes > 0),
      used_bytes      bigint NOT NULL DEFAULT 0,
      created_at      timestamptz NOT NULL
    );

    CREATE TABLE mailbox_messages (
      id             text PRIMARY KEY,
      mailbox_id     text NOT NULL REFERENCES mailboxes (id) ON DELETE CASCADE,
      delivery_id    text NOT NULL UNIQUE,
      address        text NOT NULL,
      envelope_from  text NOT NULL,
      from_header    text,
      subject        text,
      authentication jsonb NOT NULL,
      raw            bytea NOT NULL,
      raw_size       bigint NOT NULL,
      received_at    timestamptz NOT NULL,
      created_at     timestamptz NOT NULL
    );
    CREATE INDEX mailbox_messages_list ON mailbox_messages (mailbox_id, received_at DESC, id DESC);
  `,
};
