import type { Migration } from '../migrate.js';

/**
 * Transport security (issue 20; 064 because main's 063 holds the inbound feedback reports):
 * the fleet's MTA-STS policy cache (RFC 8461 §5: a known policy survives restarts and DNS
 * outages until it expires), the TLS-RPT results (RFC 8460) the daily report is built from,
 * one row per (day, policy domain, result) with its count, and the reports already sent.
 */
export const m065: Migration = {
  id: '065_transport_security',
  sql: `
    CREATE TABLE mta_sts_policies (
      domain         text        PRIMARY KEY,
      -- NULL for a negative entry (no policy, or it could not be fetched).
      policy_id      text,
      mode           text        CHECK (mode IN ('enforce', 'testing', 'none')),
      mx             text[]      NOT NULL DEFAULT '{}',
      max_age        integer,
      -- The policy file as fetched: reports quote it (policy-string).
      policy_text    text,
      fetched_at     timestamptz,
      -- Last time the _mta-sts TXT id was compared with policy_id.
      checked_at     timestamptz NOT NULL,
      expires_at     timestamptz NOT NULL,
      -- Negative entries: why there is no policy (a TLS-RPT result type, or 'no-policy').
      failure        text
    );

    CREATE TABLE mta_tlsrpt_results (
      day            date        NOT NULL,
      policy_domain  text        NOT NULL,
      -- 'sts', 'no-policy-found' (also 'tlsa' one day).
      policy_type    text        NOT NULL,
      policy_id      text        NOT NULL DEFAULT '',
      -- 'success' or an RFC 8460 result-type.
      result         text        NOT NULL,
      mx_host        text        NOT NULL DEFAULT '',
      receiving_ip   text        NOT NULL DEFAULT '',
      sending_ip     text        NOT NULL DEFAULT '',
      detail         text        NOT NULL DEFAULT '',
      count          integer     NOT NULL,
      PRIMARY KEY (day, policy_domain, policy_type, policy_id, result, mx_host, receiving_ip, sending_ip)
    );

    -- One row per report delivered: the daily job (any leader, any restart) sends each once.
    CREATE TABLE mta_tlsrpt_sent (
      day            date        NOT NULL,
      policy_domain  text        NOT NULL,
      endpoint       text        NOT NULL,
      report_id      text        NOT NULL,
      sent_at        timestamptz NOT NULL,
      PRIMARY KEY (day, policy_domain, endpoint)
    );
  `,
};
