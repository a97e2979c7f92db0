-- outbox-cdc migration V008: the dead-letter table of an outbox that keeps
-- no status (`[outbox] contract = "debezium"`, rows inserted and deleted in
-- one transaction).
--
-- Such a table holds nothing the relay could mark FAILED, so a row the
-- relay cannot publish (a refusal for the row's own reason: too large for
-- its topic, a payload the router cannot route) is written here, with the
-- record it would have been, before the slot may pass it. `redrive`
-- publishes from it. Applied only for such contracts. An identity column,
-- so the relay's role needs no privilege on a sequence to insert.

CREATE TABLE IF NOT EXISTS {{schema}}.{{dead_letter_table}} (
    seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_table    text        NOT NULL,
    event_id        text,
    topic           text,
    kafka_partition integer,
    kafka_key       bytea,
    header_names    text[]      NOT NULL DEFAULT '{}',
    header_values   bytea[]     NOT NULL DEFAULT '{}',
    value           bytea,
    source_row      jsonb,
    code            text        NOT NULL,
    message         text        NOT NULL,
    failed_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS {{dead_letter_table}}_failed_idx
    ON {{schema}}.{{dead_letter_table}} (outbox_table, failed_at);

COMMENT ON TABLE {{schema}}.{{dead_letter_table}} IS
    'outbox-cdc: rows of an outbox that keeps no status that could not be published; `outbox-cdc redrive` publishes them';
