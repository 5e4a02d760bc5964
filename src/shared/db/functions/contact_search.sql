-- The words of a contact (migration 011). contacts.search_infix and contact_search_words store
-- what these return: a change here needs a migration that rebuilds both.

-- The local part, lower-cased, with a space inserted where the contact's first or last name
-- (3+ characters) begins. Written flat (no nested calls with computed arguments) so that
-- PostgreSQL inlines it: a non-inlined SQL function costs tens of microseconds per row.
CREATE OR REPLACE FUNCTION lm_search_cut(email text, first_name text, last_name text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN replace(
    replace(lower(split_part(email, '@', 1)),
      CASE WHEN char_length(first_name) >= 3 THEN lower(first_name) ELSE '' END,
      ' ' || CASE WHEN char_length(first_name) >= 3 THEN lower(first_name) ELSE '' END),
    CASE WHEN char_length(last_name) >= 3 THEN lower(last_name) ELSE '' END,
    ' ' || CASE WHEN char_length(last_name) >= 3 THEN lower(last_name) ELSE '' END);

-- Words of a contact; kind 1 = names, 2 = local part (whole words and the pieces cut at
-- the names), 4 = domain. May contain '' and repeats; callers filter and group.
-- (unnest in the select list: no per-row tuplestore, unlike unnest in FROM.)
CREATE OR REPLACE FUNCTION lm_contact_words(email text, first_name text, last_name text)
  RETURNS TABLE (word text, kind integer)
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT unnest(regexp_split_to_array(lower(coalesce(first_name, '') || ' ' || coalesce(last_name, '')), '[^[:alnum:]]+')), 1
    UNION ALL
    SELECT unnest(regexp_split_to_array(lower(split_part(email, '@', 1)) || ' ' || lm_search_cut(email, first_name, last_name), '[^[:alnum:]]+')), 2
    UNION ALL
    SELECT unnest(regexp_split_to_array(lower(split_part(email, '@', 2)), '[^[:alnum:]]+')), 4
  $fn$;

-- Inner fragments: the name words and local-part pieces, each without its first character.
CREATE OR REPLACE FUNCTION lm_search_infix(email text, first_name text, last_name text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN regexp_replace(
    ' ' || lower(coalesce(first_name, '') || ' ' || coalesce(last_name, '')) || ' ' || lm_search_cut(email, first_name, last_name),
    '[^[:alnum:]]+[[:alnum:]]', ' ', 'g');

-- One sorted, de-duplicated row per word of a contact, with the previous word and the kinds.
CREATE OR REPLACE FUNCTION lm_contact_search_rows(email text, first_name text, last_name text)
  RETURNS TABLE (word text, prev text, kinds smallint)
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT word, lag(word) OVER (ORDER BY word), kinds
      FROM (
        SELECT w.word COLLATE "C" AS word, bit_or(w.kind)::smallint AS kinds
          FROM lm_contact_words(email, first_name, last_name) w
         WHERE w.word <> ''
         GROUP BY 1
      ) x
  $fn$;
