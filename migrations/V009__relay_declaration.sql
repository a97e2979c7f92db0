-- outbox-cdc migration V009: the one relay of each outbox, for every
-- contract.
--
-- The crash lookup and the marks rely on one relay per outbox; a copy
-- started on another slot by mistake (a second deployment, a test pointed
-- at production) or a Debezium connector restarted after a takeover would
-- publish beside it. The row with role OUTBOX_CDC or DEBEZIUM names the
-- slot that holds the outbox and the database system it was declared on;
-- `run` refuses any other slot, and only `cutover` (the takeover and the
-- hand-back among it) moves the row. A relay that finds no row claims the
-- outbox at its first start. COPY rows are copies that record nothing,
-- declared so (`relay.role = "copy"`): never the outbox's relay.

CREATE TABLE IF NOT EXISTS {{schema}}.{{relay_declaration_table}} (
    outbox_table      text        NOT NULL,
    slot              text        NOT NULL,
    role              text        NOT NULL CHECK (role IN ('OUTBOX_CDC', 'DEBEZIUM', 'COPY')),
    system_identifier text        NOT NULL,
    changed_by        text        NOT NULL DEFAULT current_user,
    changed_at        timestamptz NOT NULL DEFAULT now(),
    reason            text,
    PRIMARY KEY (outbox_table, slot)
);

-- One relay per outbox: at most one row that is not a copy.
CREATE UNIQUE INDEX IF NOT EXISTS {{relay_declaration_table}}_one_relay
    ON {{schema}}.{{relay_declaration_table}} (outbox_table)
    WHERE role <> 'COPY';

COMMENT ON TABLE {{schema}}.{{relay_declaration_table}} IS
    'outbox-cdc: the slot that publishes each outbox (OUTBOX_CDC or DEBEZIUM) and declared copies; moved only by `outbox-cdc cutover`';
