import type { Migration } from '../migrate.js';

/**
 * Public endpoints and campaigns, part 2 (builds on the REST API's contacts, topics and
 * email_sends of 010):
 * - campaigns and their recipients, materialized when a send starts so that a restart
 *   resumes exactly the recipients not yet handed over (each has its email_sends id fixed
 *   in advance: links and the MTA messageId stay the same if a message is handed over again);
 * - sign-up forms and the sign-ups that wait for double opt-in confirmation (the contact is
 *   created or added to the topic only when the sign-up is confirmed).
 * Every timestamp is written from the application's Clock.
 */
export const m061: Migration = {
  id: '061_campaigns_forms',
  sql: `
    CREATE TABLE campaigns (
      id                   text COLLATE "C" PRIMARY KEY,
      name                 text,
      subject              text NOT NULL,
      html                 text NOT NULL,
      text_body            text,
      preview_text         text NOT NULL DEFAULT '',
      from_mailbox         text NOT NULL,
      topic_id             text COLLATE "C" NOT NULL REFERENCES topics (id),
      status               text NOT NULL CHECK (status IN ('draft', 'sending', 'sent', 'failed')),
      archive_token        text UNIQUE,
      -- Eligible members when the send started (the 202's recipients).
      recipients           integer,
      -- Recipient materialization: keyset position (contact id) and whether it is complete.
      materialized_through text COLLATE "C",
      materialized         boolean NOT NULL DEFAULT false,
      error                text,
      created_at           timestamptz NOT NULL,
      updated_at           timestamptz NOT NULL,
      send_started_at      timestamptz,
      completed_at         timestamptz
    );

    -- status: queued → sent (handed to the provider) | failed (refused) | skipped (no longer
    -- eligible when its turn came: unsubscribed, suppressed, removed).
    CREATE TABLE campaign_recipients (
      campaign_id text COLLATE "C" NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
      contact_id  text COLLATE "C" NOT NULL,
      send_id     text COLLATE "C" NOT NULL UNIQUE,
      email       text NOT NULL,
      status      text NOT NULL CHECK (status IN ('queued', 'sent', 'failed', 'skipped')),
      error       text,
      updated_at  timestamptz NOT NULL,
      PRIMARY KEY (campaign_id, contact_id)
    );
    CREATE INDEX campaign_recipients_queued ON campaign_recipients (campaign_id, send_id) WHERE status = 'queued';

    CREATE TABLE forms (
      id              text COLLATE "C" PRIMARY KEY,
      name            text NOT NULL,
      topic_id        text COLLATE "C" REFERENCES topics (id) ON DELETE SET NULL,
      double_opt_in   boolean NOT NULL DEFAULT false,
      active          boolean NOT NULL DEFAULT true,
      redirect_url    text,
      required_fields text[] NOT NULL DEFAULT '{}',
      honeypot_field  text NOT NULL,
      created_at      timestamptz NOT NULL,
      updated_at      timestamptz NOT NULL
    );

    CREATE TABLE form_signups (
      id                     text COLLATE "C" PRIMARY KEY,
      form_id                text COLLATE "C" NOT NULL REFERENCES forms (id) ON DELETE CASCADE,
      topic_id               text COLLATE "C" REFERENCES topics (id) ON DELETE SET NULL,
      email                  text NOT NULL,
      first_name             text,
      last_name              text,
      fields                 jsonb NOT NULL DEFAULT '{}',
      status                 text NOT NULL CHECK (status IN ('pending', 'confirmed')),
      contact_id             text COLLATE "C",
      confirmation_sent_at   timestamptz,
      created_at             timestamptz NOT NULL,
      updated_at             timestamptz NOT NULL,
      confirmed_at           timestamptz
    );
    -- One open sign-up per form and address: a new submission refreshes it.
    CREATE UNIQUE INDEX form_signups_pending ON form_signups (form_id, lower(email)) WHERE status = 'pending';
  `,
};
