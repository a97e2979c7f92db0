-- outbox-cdc migration V005: the header checks in PL/pgSQL.
--
-- V002's checks were SQL functions with a subquery. PostgreSQL cannot inline
-- those, so it planned their bodies again for every INSERT: together about
-- 0.4 ms of every application's outbox INSERT on the benchmark machine, more
-- than the INSERT itself. PL/pgSQL keeps its plans for the session, and the
-- common empty object returns before any query. Same rules, same names: the
-- constraints that call them do not change.

CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_headers_flat(h jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF h = '{}'::jsonb THEN
        RETURN true;
    END IF;
    RETURN jsonb_typeof(h) = 'object'
       AND NOT EXISTS (SELECT 1 FROM jsonb_each(h) AS e(k, v) WHERE jsonb_typeof(e.v) <> 'string');
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_headers_unreserved(h jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF h = '{}'::jsonb OR jsonb_typeof(h) <> 'object' THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1 FROM jsonb_object_keys(h) AS k(name)
         WHERE lower(k.name) = ANY (ARRAY[{{reserved_header_names}}])
            OR left(lower(k.name), length({{reserved_header_prefix}})) = {{reserved_header_prefix}});
END
$$;
