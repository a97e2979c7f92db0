-- outbox-cdc migration V004: the journal of published rows.
--
-- The relay records the ids Kafka confirmed here, one row per batch, before
-- it lets the slot pass their transactions. That costs one narrow INSERT per
-- batch (about 17 bytes of WAL per message) where a PUBLISHED mark is a
-- non-HOT UPDATE of the whole row (about 950 bytes of WAL per message, and
-- index entries). The relay folds the journal into the rows' status
-- (PUBLISHED, with published_at = recorded_at) when it is caught up with the
-- slot, at a clean stop, and before `cutover`, `purge` and `redrive` read
-- the table. A row is published when it is PUBLISHED or listed here.

CREATE TABLE IF NOT EXISTS {{schema}}.{{published_journal_table}} (
    outbox_table text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    message_ids  uuid[]      NOT NULL
);

-- Random ids do not compress: store them out of line without trying.
ALTER TABLE {{schema}}.{{published_journal_table}} ALTER COLUMN message_ids SET STORAGE EXTERNAL;
