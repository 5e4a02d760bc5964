import type { Migration } from '../migrate.js';

/** MTA durable records: credentials, DKIM keys, suppression, ISP profiles, org limits, pool rules. */
export const m020: Migration = {
  id: '020_mta_records',
  sql: `
    CREATE TABLE mta_credentials (
      id text PRIMARY KEY,
      key_hash text NOT NULL UNIQUE,
      key_hint text NOT NULL,
      organization_id text NOT NULL,
      created_at timestamptz NOT NULL,
      revoked_at timestamptz
    );
    CREATE INDEX mta_credentials_org ON mta_credentials (organization_id, created_at);

    CREATE TABLE mta_dkim_keys (
      domain text PRIMARY KEY,
      selector text NOT NULL,
      private_key_pem text NOT NULL,
      algorithm text NOT NULL CHECK (algorithm IN ('rsa', 'ed25519')),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      pending_selector text,
      pending_private_key_pem text,
      pending_algorithm text CHECK (pending_algorithm IN ('rsa', 'ed25519')),
      pending_created_at timestamptz,
      CHECK ((pending_selector IS NULL) = (pending_private_key_pem IS NULL))
    );

    CREATE TABLE mta_suppression (
      address text PRIMARY KEY CHECK (address = lower(address)),
      reason text NOT NULL CHECK (reason IN ('hard_bounce', 'complaint', 'manual')),
      source text,
      created_at timestamptz NOT NULL
    );
    CREATE INDEX mta_suppression_reason ON mta_suppression (reason, address);

    CREATE TABLE mta_isp_profiles (
      domain text PRIMARY KEY CHECK (domain = lower(domain)),
      aliases text[] NOT NULL DEFAULT '{}',
      default_rate double precision NOT NULL,
      ceiling double precision NOT NULL,
      floor double precision NOT NULL,
      backoff_factor double precision NOT NULL,
      recovery_factor double precision NOT NULL,
      source text NOT NULL CHECK (source IN ('seed', 'custom')),
      updated_at timestamptz NOT NULL
    );

    CREATE TABLE mta_org_limits (
      organization_id text PRIMARY KEY,
      daily_limit integer NOT NULL CHECK (daily_limit >= 0),
      hourly_limit integer NOT NULL CHECK (hourly_limit >= 0),
      updated_at timestamptz NOT NULL
    );

    CREATE TABLE mta_pool_rules (
      organization_id text PRIMARY KEY,
      pool text NOT NULL,
      dedicated_ip text,
      updated_at timestamptz NOT NULL
    );
  `,
};
