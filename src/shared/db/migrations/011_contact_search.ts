import type { Migration } from '../migrate.js';

/**
 * Contact search with bounded cost for common terms (src/backend/api/contact-list.ts).
 *
 * The words of each contact (lower-cased runs of letters and digits of its names, of its
 * email's local part and of its domain) go into `contact_search_words`, one row per
 * (word, contact), kept by triggers on contacts. Its B-tree serves, without reading
 * contacts' heap:
 * - a page of the contacts having a whole word, in id order (index-only range walk);
 * - the exact number of contacts having a word that starts with a prefix: the range of the
 *   prefix is scanned index-only and each contact is counted on its first word in the range,
 *   the one whose `prev` (the contact's previous word in "C" order) lies before the range.
 *   Duplicate-free counting without a sort or hash.
 * A local part is also cut where the contact's first or last name (3+ characters) begins
 * (`jsmith` gives the word `smith` too), so a surname inside an address is a word, not an
 * inner fragment. Fragments inside words (for terms of 3+ characters) are found with a
 * trigram index over the words minus their first character (`lm_search_infix`): a match
 * there is never a word start, so only contacts with no word starting with the term are
 * read from the heap.
 *
 * Replaced: `search_tsv` (ts_rank relevance, which read every match from the heap) and
 * `search_text` with its trigram index (terms containing `@` use two B-trees, see below).
 * On an existing installation the migration rewrites contacts (the stored column) and
 * indexes every contact: about a minute per million contacts.
 * The functions are in ../functions/contact_search.sql and contact_search_triggers.sql.
 */
export const m011: Migration = {
  id: '011_contact_search',
  // The generated column, the backfill and the triggers call them.
  functions: ['contact_search', 'contact_search_triggers'],
  sql: `
    -- search_infix is stored so that a trigram match is rechecked with a plain LIKE, not the
    -- regexp of lm_search_infix.
    ALTER TABLE contacts
      DROP COLUMN search_tsv,
      DROP COLUMN search_text,
      ADD COLUMN search_infix text GENERATED ALWAYS AS (lm_search_infix(email, first_name, last_name)) STORED;

    CREATE TABLE contact_search_words (
      word       text COLLATE "C" NOT NULL,
      contact_id text COLLATE "C" NOT NULL,
      -- The contact's previous word in "C" order (null for its first): counts a contact once
      -- per prefix range without a sort (see above).
      prev       text COLLATE "C",
      -- Bit set of lm_contact_words kinds: 1 names, 2 local part, 4 domain.
      kinds      smallint NOT NULL
    ) WITH (
      -- Index-only scans need the visibility map current: vacuum after 2 % new rows, not 20 %.
      autovacuum_vacuum_insert_scale_factor = 0.02,
      autovacuum_vacuum_scale_factor = 0.05
    );

    -- Existing contacts, before the indexes (a sorted build beats row-by-row inserts).
    INSERT INTO contact_search_words (word, contact_id, prev, kinds)
    SELECT r.word, c.id, r.prev, r.kinds FROM contacts c, lm_contact_search_rows(c.email, c.first_name, c.last_name) r;
    ALTER TABLE contact_search_words ADD PRIMARY KEY (word, contact_id) INCLUDE (prev, kinds);
    -- Deletes and the "has no word starting with the term" check go by contact.
    CREATE INDEX contact_search_words_contact ON contact_search_words (contact_id);
    CREATE INDEX contacts_search_infix ON contacts USING gin (search_infix gin_trgm_ops);
    -- Terms containing @ ("local@domain" fragments): the address contains the term exactly when
    -- its local part ends with the part before the @ and its domain starts with the part after.
    -- Two B-tree prefix ranges; a trigram index over addresses costs ~10x more to build.
    CREATE INDEX contacts_email_domain ON contacts ((lower(split_part(email, '@', 2)) COLLATE "C"));
    CREATE INDEX contacts_email_local_reversed ON contacts ((reverse(lower(split_part(email, '@', 1))) COLLATE "C"));

    CREATE TRIGGER contacts_search_insert AFTER INSERT ON contacts
      REFERENCING NEW TABLE AS lm_search_new FOR EACH STATEMENT EXECUTE FUNCTION lm_contact_search_insert();
    -- A row trigger, only for rows whose id, address or names change: other updates (updated_at,
    -- DOI names already set) capture no transition tables and do no work.
    CREATE TRIGGER contacts_search_update AFTER UPDATE OF id, email, first_name, last_name ON contacts
      FOR EACH ROW
      WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.email IS DISTINCT FROM NEW.email
            OR OLD.first_name IS DISTINCT FROM NEW.first_name OR OLD.last_name IS DISTINCT FROM NEW.last_name)
      EXECUTE FUNCTION lm_contact_search_update();
    CREATE TRIGGER contacts_search_delete AFTER DELETE ON contacts
      REFERENCING OLD TABLE AS lm_search_old FOR EACH STATEMENT EXECUTE FUNCTION lm_contact_search_delete();
    CREATE TRIGGER contacts_search_truncate AFTER TRUNCATE ON contacts
      FOR EACH STATEMENT EXECUTE FUNCTION lm_contact_search_truncate();
  `,
};
