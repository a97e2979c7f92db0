-- outbox-cdc migration V002: what change data capture needs beside the outbox.
--
-- Applicable on its own (`outbox-cdc migrate --cdc-only`) to an outbox table an
-- application already created: every step checks what exists first.

-- 1. routing_key as a replicated column.
--    Before PostgreSQL 18, pgoutput does not carry generated columns: a
--    GENERATED ALWAYS ... STORED column is converted in place (values kept)
--    and a trigger keeps it. From 18 on, the publication publishes stored
--    generated columns (step 5) and the platform's column stays as it is.
--    A missing column is added and back-filled.
DO $$
DECLARE
    generated "char";
BEGIN
    SELECT a.attgenerated INTO generated
      FROM pg_attribute a
     WHERE a.attrelid = '{{schema}}.{{table}}'::regclass
       AND a.attname = 'routing_key'
       AND NOT a.attisdropped;
    IF NOT FOUND THEN
        ALTER TABLE {{schema}}.{{table}} ADD COLUMN routing_key text;
        UPDATE {{schema}}.{{table}} SET routing_key = COALESCE(partition_key, message_id::text);
    ELSIF generated = 's' AND current_setting('server_version_num')::int < 180000 THEN
        ALTER TABLE {{schema}}.{{table}} ALTER COLUMN routing_key DROP EXPRESSION;
    END IF;
    ALTER TABLE {{schema}}.{{table}} ALTER COLUMN routing_key SET NOT NULL;
END
$$;

-- The rule, stated once: the key is the partition key, or the message id.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_set_routing_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.routing_key := COALESCE(NEW.partition_key, NEW.message_id::text);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS outbox_cdc_routing_key ON {{schema}}.{{table}};
DO $$
BEGIN
    -- A generated column (kept on 18+) computes the rule itself.
    IF (SELECT a.attgenerated FROM pg_attribute a
         WHERE a.attrelid = '{{schema}}.{{table}}'::regclass AND a.attname = 'routing_key') <> 's' THEN
        CREATE TRIGGER outbox_cdc_routing_key
            BEFORE INSERT OR UPDATE ON {{schema}}.{{table}}
            FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_cdc_set_routing_key();
    END IF;
END
$$;

-- 2. Named CHECK constraints that refuse bad rows at INSERT.
--    Added NOT VALID (enforced for new rows at once), then validated; when old
--    rows violate one, it stays NOT VALID with a warning and the relay records
--    the old rows it meets as FAILED instead of publishing them.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_ensure_check(tbl regclass, name text, expr text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = tbl AND c.conname = name) THEN
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s) NOT VALID', tbl, name, expr);
    END IF;
    BEGIN
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', tbl, name);
    EXCEPTION WHEN check_violation THEN
        RAISE WARNING 'constraint % on % stays NOT VALID: existing rows violate it (new rows are checked)', name, tbl;
    END;
END
$$;

-- Application headers: a JSON object of string values.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_headers_flat(h jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_typeof(h) = 'object'
       AND NOT EXISTS (SELECT 1 FROM jsonb_each(h) AS e(k, v) WHERE jsonb_typeof(e.v) <> 'string')
$$;

-- Application headers may not use the platform's names ({{reserved_header_names}}
-- and the prefix {{reserved_header_prefix}}), compared without regard to case.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_headers_unreserved(h jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_typeof(h) <> 'object'
        OR NOT EXISTS (
            SELECT 1 FROM jsonb_object_keys(h) AS k(name)
             WHERE lower(k.name) = ANY (ARRAY[{{reserved_header_names}}])
                OR left(lower(k.name), length({{reserved_header_prefix}})) = {{reserved_header_prefix}})
$$;

-- A W3C traceparent: version-traceid-parentid-flags in lowercase hex, version
-- ff invalid, all-zero ids invalid, version 00 exactly 55 characters.
CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_traceparent_ok(tp text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT tp ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
       AND left(tp, 2) <> 'ff'
       AND substr(tp, 4, 32) <> repeat('0', 32)
       AND substr(tp, 37, 16) <> repeat('0', 16)
       AND (left(tp, 2) <> '00' OR length(tp) = 55)
$$;

SELECT {{schema}}.outbox_cdc_ensure_check('{{schema}}.{{table}}', c.name, c.expr)
  FROM (VALUES
    ('ck_outbox_routing_key',
     $c$routing_key = COALESCE(partition_key, message_id::text)$c$),
    -- topic = prefix || destination must be a legal Kafka topic name.
    ('ck_outbox_destination_topic',
     $c$destination <> '' AND octet_length({{topic_prefix}} || destination) <= 249 AND ({{topic_prefix}} || destination) ~ '^[A-Za-z0-9._-]+$' AND ({{topic_prefix}} || destination) NOT IN ('.', '..')$c$),
    ('ck_outbox_headers_flat',
     $c${{schema}}.outbox_cdc_headers_flat(headers)$c$),
    ('ck_outbox_headers_reserved',
     $c${{schema}}.outbox_cdc_headers_unreserved(headers)$c$),
    ('ck_outbox_traceparent',
     $c$traceparent IS NULL OR {{schema}}.outbox_cdc_traceparent_ok(traceparent)$c$),
    ('ck_outbox_tenant',
     $c$tenant IS NULL OR tenant ~ '^[a-z0-9][a-z0-9._-]{0,63}$'$c$),
    ('ck_outbox_schema_uri_subject',
     $c$schema_uri IS NULL OR schema_subject IS NOT NULL$c$)
  ) AS c(name, expr);

-- 3. The declared relay mode, and the fence that makes it binding: while an
--    outbox is CHANGE_DATA_CAPTURE, no polling relay may claim a row.
CREATE TABLE IF NOT EXISTS {{schema}}.{{relay_mode_table}} (
    outbox_table text        NOT NULL PRIMARY KEY,
    mode         text        NOT NULL CHECK (mode IN ('POLLING', 'CHANGE_DATA_CAPTURE')),
    changed_by   text        NOT NULL DEFAULT current_user,
    changed_at   timestamptz NOT NULL DEFAULT now(),
    reason       text
);

CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_fence_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    declared text;
BEGIN
    IF NEW.status = 'IN_FLIGHT' THEN
        SELECT m.mode INTO declared
          FROM {{schema}}.{{relay_mode_table}} m
         WHERE m.outbox_table = TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
        IF declared = 'CHANGE_DATA_CAPTURE' THEN
            RAISE EXCEPTION 'OUTBOX_CLAIM_FENCED: the relay mode of %.% is CHANGE_DATA_CAPTURE; a polling relay may not claim message %',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.message_id
                USING ERRCODE = 'OX001',
                      HINT = 'Stop the polling relay. To return to polling, stop outbox-cdc and run: outbox-cdc cutover --to polling';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS outbox_cdc_fence ON {{schema}}.{{table}};
CREATE TRIGGER outbox_cdc_fence
    BEFORE UPDATE OF status ON {{schema}}.{{table}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.outbox_cdc_fence_claims();

-- 4. Heartbeats: Debezium's heartbeat query inserts here. The table is in the
--    publication but not in Debezium's include list, so an idle outbox still
--    gives its slot a position to confirm and WAL is not retained.
CREATE TABLE IF NOT EXISTS {{schema}}.{{heartbeat_table}} (
    id        bigserial   NOT NULL PRIMARY KEY,
    connector text        NOT NULL,
    beat_at   timestamptz NOT NULL DEFAULT now()
);

-- 5. The publication: committed INSERTs of the outbox (and heartbeats) only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '{{publication}}') THEN
        CREATE PUBLICATION {{publication}}
            FOR TABLE {{schema}}.{{table}}, {{schema}}.{{heartbeat_table}}
            WITH (publish = 'insert');
    ELSE
        IF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                        WHERE pubname = '{{publication}}' AND schemaname = '{{schema}}' AND tablename = '{{table}}') THEN
            ALTER PUBLICATION {{publication}} ADD TABLE {{schema}}.{{table}};
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_publication_tables
                        WHERE pubname = '{{publication}}' AND schemaname = '{{schema}}' AND tablename = '{{heartbeat_table}}') THEN
            ALTER PUBLICATION {{publication}} ADD TABLE {{schema}}.{{heartbeat_table}};
        END IF;
        ALTER PUBLICATION {{publication}} SET (publish = 'insert');
    END IF;
    -- PostgreSQL 18+ with the generated routing_key kept: publish it.
    IF (SELECT a.attgenerated FROM pg_attribute a
         WHERE a.attrelid = '{{schema}}.{{table}}'::regclass AND a.attname = 'routing_key') = 's' THEN
        EXECUTE 'ALTER PUBLICATION {{publication}} SET (publish_generated_columns = stored)';
    END IF;
END
$$;
