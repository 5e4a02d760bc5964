import type { Migration } from '../migrate.js';

/**
 * Asynchronous bounces and complaints (docs/bounces.md): every report received is recorded
 * with its authentication results and what became of it, kept 16 days. `dedupe_key` makes a
 * replayed report a no-op (mta.md: complaint de-duplication retention 16 days). Provenance
 * gains the sending IP, so a soft bounce adapts the throttle of the IP that sent. Return-path
 * hosts registered per sending domain give VERP and CFBL addresses aligned with that domain.
 */
export const m063: Migration = {
  id: '063_feedback_reports',
  sql: `
    ALTER TABLE mta_send_provenance ADD COLUMN IF NOT EXISTS ip text;
    CREATE TABLE IF NOT EXISTS mta_feedback_reports (
      id bigserial PRIMARY KEY,
      dedupe_key text UNIQUE,
      received_at timestamptz NOT NULL,
      kind text NOT NULL,
      outcome text NOT NULL,
      source text,
      message_id text,
      organization_id text,
      recipient text,
      reason text,
      hard boolean,
      feedback_type text,
      spf text,
      dkim text,
      dmarc text,
      remote_ip text
    );
    CREATE INDEX IF NOT EXISTS mta_feedback_reports_received_at ON mta_feedback_reports (received_at);
    CREATE TABLE IF NOT EXISTS mta_return_path_hosts (
      domain text PRIMARY KEY,
      host text NOT NULL,
      updated_at timestamptz NOT NULL
    );
  `,
};
