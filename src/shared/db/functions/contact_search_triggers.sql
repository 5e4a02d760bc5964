-- Triggers of contacts (migration 011) that keep contact_search_words.

CREATE OR REPLACE FUNCTION lm_contact_search_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  -- Per contact (a LATERAL call), not one GROUP BY over the batch: no sort or hash that
  -- spills past work_mem on bulk inserts.
  INSERT INTO contact_search_words (word, contact_id, prev, kinds)
  SELECT r.word, n.id, r.prev, r.kinds FROM lm_search_new n, lm_contact_search_rows(n.email, n.first_name, n.last_name) r;
  RETURN NULL;
END $fn$;

CREATE OR REPLACE FUNCTION lm_contact_search_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM contact_search_words WHERE contact_id = OLD.id;
  INSERT INTO contact_search_words (word, contact_id, prev, kinds)
  SELECT r.word, NEW.id, r.prev, r.kinds FROM lm_contact_search_rows(NEW.email, NEW.first_name, NEW.last_name) r;
  RETURN NULL;
END $fn$;

CREATE OR REPLACE FUNCTION lm_contact_search_delete() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  DELETE FROM contact_search_words WHERE contact_id IN (SELECT id FROM lm_search_old);
  RETURN NULL;
END $fn$;

CREATE OR REPLACE FUNCTION lm_contact_search_truncate() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  TRUNCATE contact_search_words;
  RETURN NULL;
END $fn$;
