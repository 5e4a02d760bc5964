import type { Migration } from '../migrate.js';

/**
 * Public endpoints and campaigns, part 2 (builds on the REST API's contacts, topics and
 * email_sends of 010):
 * - campaigns: the fan-out walks the topic's members in contact-id order with a cursor that
 *   moves only when a batch's hand-over is recorded; each message's email_sends id is derived
 *   from (campaign, contact), so a batch handed over again after a crash keeps its ids (and
 *   the MTA de-duplicates on them);
 * - sign-up forms and the sign-ups that wait for double opt-in confirmation (the contact is
 *   created or added to the topic only when the sign-up is confirmed).
 * Every timestamp is written from the application's Clock.
 */
export const m061: Migration = {
  id: '061_campaigns_forms',
  sql: `
    CREATE TABLE campaigns (
      id              text COLLATE "C" PRIMARY KEY,
      name            text,
      subject         text NOT NULL,
      html            text NOT NULL,
      text_body       text,
      preview_text    text NOT NULL DEFAULT '',
      from_mailbox    text NOT NULL,
      topic_id        text COLLATE "C" NOT NULL REFERENCES topics (id),
      status          text NOT NULL CHECK (status IN ('draft', 'sending', 'sent', 'failed')),
      archive_token   text UNIQUE,
      -- Eligible members when the send started (the 202's recipients).
      recipients      integer,
      -- Fan-out position: members are handed over in contact-id order; every member up to
      -- this id has its email_sends row and was handed over (or refused).
      cursor_contact  text COLLATE "C",
      error           text,
      created_at      timestamptz NOT NULL,
      updated_at      timestamptz NOT NULL,
      send_started_at timestamptz,
      completed_at    timestamptz
    );

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
