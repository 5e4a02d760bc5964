-- Statement-level triggers of contacts (migration 010) keep the shards of contact_count_shards.

CREATE OR REPLACE FUNCTION lm_contacts_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE c bigint;
BEGIN
  SELECT count(*) INTO c FROM lm_new_rows;
  IF c > 0 THEN
    UPDATE contact_count_shards SET n = n + c WHERE shard = pg_backend_pid() % 16;
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION lm_contacts_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE c bigint;
BEGIN
  SELECT count(*) INTO c FROM lm_old_rows;
  IF c > 0 THEN
    UPDATE contact_count_shards SET n = n - c WHERE shard = pg_backend_pid() % 16;
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION lm_contacts_count_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE contact_count_shards SET n = 0;
  RETURN NULL;
END $$;
