import type { Migration } from '../migrate.js';

/**
 * DKIM: one active key per (domain, algorithm), so a domain can sign with RSA and Ed25519
 * at once (RFC 8463 recommends both). Selectors of one domain's active keys must differ: both
 * are published as `<selector>._domainkey.<domain>`. Existing rows (one per domain) fit both.
 */
export const m023: Migration = {
  id: '023_dkim_multi_key',
  sql: `
    ALTER TABLE mta_dkim_keys DROP CONSTRAINT mta_dkim_keys_pkey;
    ALTER TABLE mta_dkim_keys ADD CONSTRAINT mta_dkim_keys_pkey PRIMARY KEY (domain, algorithm);
    CREATE UNIQUE INDEX mta_dkim_keys_selector ON mta_dkim_keys (domain, selector);
  `,
};
