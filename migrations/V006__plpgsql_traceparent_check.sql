-- outbox-cdc migration V006: the traceparent check in PL/pgSQL.
--
-- As a one-line SQL function PostgreSQL inlined it into ck_outbox_traceparent,
-- which means parsing and planning its body again for every INSERT, whatever
-- the row holds (CHECK constraints are prepared per statement). PL/pgSQL
-- keeps its expression for the session. Same rule, same name: the constraint
-- that calls it does not change, so nothing is locked or validated again.

CREATE OR REPLACE FUNCTION {{schema}}.outbox_cdc_traceparent_ok(tp text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN tp ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
       AND left(tp, 2) <> 'ff'
       AND substr(tp, 4, 32) <> repeat('0', 32)
       AND substr(tp, 37, 16) <> repeat('0', 16)
       AND (left(tp, 2) <> '00' OR length(tp) = 55);
END
$$;
