import type { Migration } from '../migrate.js';

/**
 * Inbound delivery feedback (src/backend/feedback):
 * - feedback_events: every applied provider event; UNIQUE (source, provider_event_id) is the
 *   replay guard, inserted in the same transaction as the event's effects.
 * - suppressions: the backend's blocklist, one row per lower-cased address.
 * - contact_activity: what happened to a contact's mail (by address; contact id when known).
 * - feedback_inbox: the team inbox (inbound.received from the MTA: campaign replies).
 * - feedback_mta_events: the MTA's operational events (circuit breaker, IP reputation).
 * - campaign_sending_pauses: an open row (resumed_at null) pauses campaign sending.
 * Times come from the application's Clock.
 */
export const m050: Migration = {
  id: '050_feedback',
  sql: `
    CREATE TABLE feedback_events (
      id                  text PRIMARY KEY,
      source              text NOT NULL,
      provider_event_id   text NOT NULL,
      kind                text NOT NULL CHECK (kind IN ('lifecycle', 'inbound', 'operational')),
      type                text NOT NULL,
      recipient           text,
      provider_message_id text,
      send_id             text,
      detail              jsonb NOT NULL DEFAULT '{}',
      occurred_at         timestamptz NOT NULL,
      received_at         timestamptz NOT NULL,
      UNIQUE (source, provider_event_id)
    );
    CREATE INDEX feedback_events_recipient ON feedback_events (recipient, occurred_at) WHERE recipient IS NOT NULL;
    CREATE INDEX feedback_events_received ON feedback_events (received_at);

    CREATE TABLE suppressions (
      email      text PRIMARY KEY CHECK (email = lower(email)),
      reason     text NOT NULL,
      source     text NOT NULL,
      created_at timestamptz NOT NULL
    );

    CREATE TABLE contact_activity (
      id          text PRIMARY KEY,
      email       text NOT NULL,
      contact_id  text,
      type        text NOT NULL,
      send_id     text,
      source      text NOT NULL,
      detail      jsonb NOT NULL DEFAULT '{}',
      occurred_at timestamptz NOT NULL,
      created_at  timestamptz NOT NULL
    );
    CREATE INDEX contact_activity_email ON contact_activity (email, occurred_at DESC);
    CREATE INDEX contact_activity_contact ON contact_activity (contact_id, occurred_at DESC) WHERE contact_id IS NOT NULL;

    CREATE TABLE feedback_inbox (
      id           text PRIMARY KEY,
      message_id   text,
      from_address text NOT NULL,
      to_addresses text[] NOT NULL,
      subject      text NOT NULL,
      text_body    text,
      html_body    text,
      in_reply_to  text,
      refs         text[] NOT NULL DEFAULT '{}',
      extra        jsonb NOT NULL DEFAULT '{}',
      received_at  timestamptz NOT NULL,
      created_at   timestamptz NOT NULL
    );
    CREATE INDEX feedback_inbox_received ON feedback_inbox (received_at DESC, id DESC);

    CREATE TABLE feedback_mta_events (
      id              text PRIMARY KEY,
      event           text NOT NULL,
      severity        text NOT NULL,
      organization_id text,
      ip              text,
      data            jsonb NOT NULL,
      occurred_at     timestamptz NOT NULL,
      received_at     timestamptz NOT NULL
    );
    CREATE INDEX feedback_mta_events_received ON feedback_mta_events (received_at DESC, id DESC);

    CREATE TABLE campaign_sending_pauses (
      id              text PRIMARY KEY,
      mta_event_id    text REFERENCES feedback_mta_events (id),
      organization_id text,
      reason          text NOT NULL,
      paused_at       timestamptz NOT NULL,
      resumed_at      timestamptz,
      resume_note     text
    );
    CREATE INDEX campaign_sending_pauses_open ON campaign_sending_pauses (paused_at) WHERE resumed_at IS NULL;
  `,
};
