import type { Migration } from '../migrate.js';

/**
 * Public endpoints and campaigns, part 1: templates and their share links, campaign archive
 * snapshots, and open/click tracking of email_sends (010). Every timestamp is written from
 * the injected Clock.
 */
export const m060: Migration = {
  id: '060_public_content',
  sql: `
    CREATE TABLE templates (
      id           text PRIMARY KEY,
      name         text NOT NULL,
      subject      text NOT NULL,
      html         text NOT NULL,
      preview_text text NOT NULL DEFAULT '',
      created_at   timestamptz NOT NULL,
      updated_at   timestamptz NOT NULL
    );

    -- A share link is a snapshot of the template taken when the link is created. Only a
    -- SHA-256 of the token is stored: a database read does not hand out live links.
    CREATE TABLE share_links (
      token_hash   text PRIMARY KEY,
      template_id  text NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
      subject      text NOT NULL,
      html         text NOT NULL,
      preview_text text NOT NULL,
      created_at   timestamptz NOT NULL,
      expires_at   timestamptz NOT NULL,
      revoked_at   timestamptz
    );
    CREATE INDEX share_links_template ON share_links (template_id, created_at);

    -- View-in-browser snapshot of a sent campaign. The token is in every copy of the email,
    -- so it is public by design and stored as is.
    CREATE TABLE campaign_archives (
      token             text PRIMARY KEY,
      campaign_id       text NOT NULL UNIQUE,
      subject           text NOT NULL,
      html              text NOT NULL,
      organization_name text NOT NULL,
      sent_at           timestamptz NOT NULL
    );

    -- Open and click counters of one tracked message (an email_sends row, REST API area),
    -- created by its first open or click (hits for ids without an email_sends row create
    -- nothing). contact_id and sent_at are copied from the send for the engagement score.
    CREATE TABLE email_engagement (
      email_send_id        text COLLATE "C" PRIMARY KEY REFERENCES email_sends (id) ON DELETE CASCADE,
      contact_id           text COLLATE "C",
      campaign_id          text,
      sent_at              timestamptz NOT NULL,
      opens                integer NOT NULL DEFAULT 0,
      machine_opens        integer NOT NULL DEFAULT 0,
      proxy_opens          integer NOT NULL DEFAULT 0,
      first_open_at        timestamptz,
      first_human_open_at  timestamptz,
      last_open_at         timestamptz,
      clicks               integer NOT NULL DEFAULT 0,
      machine_clicks       integer NOT NULL DEFAULT 0,
      first_click_at       timestamptz,
      first_human_click_at timestamptz,
      last_click_at        timestamptz,
      last_click_url       text
    ) WITH (fillfactor = 80);
    CREATE INDEX email_engagement_contact ON email_engagement (contact_id, sent_at) WHERE contact_id IS NOT NULL;
    CREATE INDEX email_engagement_campaign ON email_engagement (campaign_id) WHERE campaign_id IS NOT NULL;

    -- Every click (per-link statistics); machine clicks are kept and flagged, never dropped.
    CREATE TABLE email_clicks (
      id            bigserial PRIMARY KEY,
      email_send_id text COLLATE "C" NOT NULL REFERENCES email_sends (id) ON DELETE CASCADE,
      url           text NOT NULL,
      clicked_at    timestamptz NOT NULL,
      machine       boolean NOT NULL,
      reason        text
    );
    CREATE INDEX email_clicks_send ON email_clicks (email_send_id, clicked_at);
  `,
};
