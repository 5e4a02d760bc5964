import type { Migration } from '../migrate.js';

/**
 * Provider routes (issue 22, admin `/admin/provider-routes`): the sending provider per message
 * stream, optionally per sending domain ('' = every domain of the stream). Writes NOTIFY
 * `lm_provider_routes` so every backend instance re-reads (api/sending/router.ts).
 */
export const m064: Migration = {
  id: '064_provider_routes',
  sql: `
    CREATE TABLE provider_routes (
      stream      text        NOT NULL CHECK (stream IN ('transactional', 'campaign')),
      domain      text        NOT NULL DEFAULT '',
      provider    text        NOT NULL CHECK (provider IN ('mta', 'ses', 'resend', 'smtp', 'mandrill')),
      created_at  timestamptz NOT NULL,
      updated_at  timestamptz NOT NULL,
      PRIMARY KEY (stream, domain)
    );
  `,
};
