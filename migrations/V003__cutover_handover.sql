-- outbox-cdc migration V003: the backlog hand-over of `outbox-cdc cutover`.
--
-- When an outbox is cut over to change data capture, the rows not yet
-- PUBLISHED or FAILED that were committed before the relay's slot started
-- (read with the snapshot exported when the slot was created) are listed
-- here, in order. `outbox-cdc run` publishes them before it streams, so
-- nothing written before the switch is lost.

CREATE TABLE IF NOT EXISTS {{schema}}.{{handover_state_table}} (
    outbox_table text        NOT NULL PRIMARY KEY,
    slot         text        NOT NULL,
    -- PREPARING: the slot may exist but the list is not complete (cutover
    -- re-runs it); READY: the relay publishes the list; DONE: handed over.
    state        text        NOT NULL CHECK (state IN ('PREPARING', 'READY', 'DONE')),
    rows_listed  bigint      NOT NULL DEFAULT 0,
    consistent_point pg_lsn,
    changed_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {{schema}}.{{handover_table}} (
    outbox_table text   NOT NULL,
    seq          bigint NOT NULL,
    message_id   uuid   NOT NULL,
    PRIMARY KEY (outbox_table, seq)
);
