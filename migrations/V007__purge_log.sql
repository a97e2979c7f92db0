-- outbox-cdc migration V007: what `purge` deleted.
--
-- `purge` records, in the statement that deletes a batch, the batch's
-- destinations, the creation times of its first and last row and how many
-- rows it held. `replay` reads it to refuse a window that retention has
-- thinned, and to say which rows are gone: a replay of such a window would
-- look complete while it silently left rows out.

CREATE TABLE IF NOT EXISTS {{schema}}.{{purge_log_table}} (
    outbox_table text        NOT NULL,
    purged_at    timestamptz NOT NULL DEFAULT now(),
    destination  text        NOT NULL,
    status       text        NOT NULL,
    created_from timestamptz NOT NULL,
    created_to   timestamptz NOT NULL,
    row_count    bigint      NOT NULL
);

CREATE INDEX IF NOT EXISTS {{purge_log_table}}_created_idx
    ON {{schema}}.{{purge_log_table}} (outbox_table, created_to);
