import type { Migration } from '../migrate.js';

/**
 * The REST API's data (src/backend/api): contacts, topics and memberships, API keys,
 * contact events and email sends. Other areas build on these tables:
 * - forms (issue 4) create contacts with source `form` and memberships;
 * - campaigns select members `WHERE unsubscribed_at IS NULL AND doi_status <> 'pending'`;
 * - feedback (issue 6) moves `email_sends.status` and reads `to_email`, `provider_message_id`.
 * Every timestamp is written from the application's Clock, never `now()`.
 *
 * Ids are `<prefix>_<time><random>` (crypto.newId) under the "C" collation, so `ORDER BY id`
 * is creation order on every server locale and keyset pagination compares bytes.
 */
export const m010: Migration = {
  id: '010_backend_api',
  // The count triggers call them.
  functions: ['contact_count'],
  sql: `
    CREATE EXTENSION IF NOT EXISTS pg_trgm;

    CREATE TABLE contacts (
      id          text COLLATE "C" PRIMARY KEY,
      email       text NOT NULL,
      first_name  text,
      last_name   text,
      source      text NOT NULL,
      created_at  timestamptz NOT NULL,
      updated_at  timestamptz NOT NULL,
      -- Search documents, maintained by PostgreSQL: trigram text for substring matches and
      -- a weighted tsvector (names A, email local part B, email domain C) for word matches.
      search_text text GENERATED ALWAYS AS (
        lower(email || ' ' || coalesce(first_name, '') || ' ' || coalesce(last_name, ''))
      ) STORED,
      search_tsv  tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', lower(coalesce(first_name, '') || ' ' || coalesce(last_name, ''))), 'A') ||
        setweight(to_tsvector('simple', regexp_replace(lower(split_part(email, '@', 1)), '[^a-z0-9]+', ' ', 'g')), 'B') ||
        setweight(to_tsvector('simple', regexp_replace(lower(split_part(email, '@', 2)), '[^a-z0-9]+', ' ', 'g')), 'C')
      ) STORED
    );
    -- Email is unique case-insensitively; lookups use lower(email) = lower($1).
    CREATE UNIQUE INDEX contacts_email_lower ON contacts (lower(email));
    CREATE INDEX contacts_search_tsv ON contacts USING gin (search_tsv);
    CREATE INDEX contacts_search_trgm ON contacts USING gin (search_text gin_trgm_ops);

    -- Exact contact count without COUNT(*) over the table: statement-level triggers add each
    -- statement's row count to one of 16 shards (by backend pid), so concurrent writers rarely
    -- wait on the same row and a bulk COPY costs one update. Sum the shards to read it.
    CREATE TABLE contact_count_shards (
      shard integer PRIMARY KEY,
      n     bigint NOT NULL
    );
    INSERT INTO contact_count_shards (shard, n) SELECT g, 0 FROM generate_series(0, 15) g;

    CREATE TRIGGER contacts_count_insert AFTER INSERT ON contacts
      REFERENCING NEW TABLE AS lm_new_rows FOR EACH STATEMENT EXECUTE FUNCTION lm_contacts_count_insert();
    CREATE TRIGGER contacts_count_delete AFTER DELETE ON contacts
      REFERENCING OLD TABLE AS lm_old_rows FOR EACH STATEMENT EXECUTE FUNCTION lm_contacts_count_delete();
    CREATE TRIGGER contacts_count_truncate AFTER TRUNCATE ON contacts
      FOR EACH STATEMENT EXECUTE FUNCTION lm_contacts_count_truncate();

    CREATE TABLE topics (
      id                    text COLLATE "C" PRIMARY KEY,
      name                  text NOT NULL,
      require_double_opt_in boolean NOT NULL DEFAULT false,
      created_at            timestamptz NOT NULL,
      updated_at            timestamptz NOT NULL
    );
    CREATE UNIQUE INDEX topics_name_lower ON topics (lower(name));

    -- A membership is active while unsubscribed_at is null. Removing (API, unsubscribe link,
    -- preference center) sets unsubscribed_at and keeps the row as the record of consent.
    CREATE TABLE topic_memberships (
      topic_id        text COLLATE "C" NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
      contact_id      text COLLATE "C" NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
      doi_status      text NOT NULL CHECK (doi_status IN ('not_required', 'pending', 'confirmed')),
      source          text NOT NULL,
      doi_sent_at     timestamptz,
      confirmed_at    timestamptz,
      unsubscribed_at timestamptz,
      created_at      timestamptz NOT NULL,
      updated_at      timestamptz NOT NULL,
      PRIMARY KEY (topic_id, contact_id)
    );
    CREATE INDEX topic_memberships_contact ON topic_memberships (contact_id);

    -- Only a SHA-256 of each key is stored; prefix is the first characters, for display.
    CREATE TABLE api_keys (
      id           text COLLATE "C" PRIMARY KEY,
      name         text,
      prefix       text NOT NULL,
      key_hash     text NOT NULL UNIQUE,
      scopes       text[] NOT NULL DEFAULT '{}',
      created_at   timestamptz NOT NULL,
      revoked_at   timestamptz,
      last_used_at timestamptz
    );

    -- Named events posted for a contact (POST /api/v1/events), input for automations.
    CREATE TABLE contact_events (
      id              text COLLATE "C" PRIMARY KEY,
      contact_id      text COLLATE "C" NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
      name            text NOT NULL,
      properties      jsonb NOT NULL DEFAULT '{}',
      idempotency_key text UNIQUE,
      request_hash    text,
      created_at      timestamptz NOT NULL
    );
    CREATE INDEX contact_events_contact ON contact_events (contact_id, created_at);
    CREATE INDEX contact_events_name ON contact_events (name, created_at);

    -- One row per message handed to a sending provider (one recipient each).
    -- status: sending (row written, provider not yet answered) → accepted (provider took it)
    -- → sent/delivered/bounced/complained... (feedback, issue 6); failed when the provider refused.
    CREATE TABLE email_sends (
      id                  text COLLATE "C" PRIMARY KEY,
      type                text NOT NULL CHECK (type IN ('transactional', 'campaign')),
      contact_id          text COLLATE "C" REFERENCES contacts (id) ON DELETE SET NULL,
      campaign_id         text,
      to_email            text NOT NULL,
      from_email          text NOT NULL,
      subject             text NOT NULL,
      -- RFC 5322 Message-ID when known.
      message_id          text,
      provider            text NOT NULL,
      provider_message_id text,
      status              text NOT NULL,
      error               text,
      idempotency_key     text,
      request_hash        text,
      -- What the send is for beyond type, e.g. {"purpose": "doi_confirmation", "topicId": ...}.
      metadata            jsonb NOT NULL DEFAULT '{}',
      created_at          timestamptz NOT NULL,
      updated_at          timestamptz NOT NULL
    );
    CREATE UNIQUE INDEX email_sends_idempotency ON email_sends (type, idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE INDEX email_sends_contact ON email_sends (contact_id, created_at) WHERE contact_id IS NOT NULL;
    CREATE INDEX email_sends_campaign ON email_sends (campaign_id) WHERE campaign_id IS NOT NULL;
    CREATE INDEX email_sends_provider_message ON email_sends (provider_message_id) WHERE provider_message_id IS NOT NULL;
  `,
};
