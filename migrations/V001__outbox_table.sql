-- outbox-cdc migration V001: the outbox table.
--
-- One row per message. message_id is the primary key: the identity that every
-- retry and every relay preserves, and the id consumers deduplicate on.
-- Applied only where the table does not exist yet; an outbox that an
-- application already created is left as it is (V002 adds what CDC needs).
--
-- Placeholders ({{schema}}, {{table}}, ...) are filled by `outbox-cdc migrate`
-- from the configuration; `outbox-cdc migrate --print` shows the result.

CREATE TABLE IF NOT EXISTS {{schema}}.{{table}} (
    message_id        uuid        NOT NULL PRIMARY KEY,
    destination       text        NOT NULL,
    message_type      text        NOT NULL,
    message_version   integer     NOT NULL,
    content_type      text        NOT NULL,
    payload           bytea       NOT NULL,
    headers           jsonb       NOT NULL DEFAULT '{}',

    -- Relay bookkeeping from the polling era, kept so either relay can run.
    status            text        NOT NULL DEFAULT 'PENDING',
    attempts          integer     NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    published_at      timestamptz,
    lease_expires_at  timestamptz,
    lease_owner       text,
    lease_token       bigint      NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_failure_code text,

    -- Canonical provenance: columns rather than a blob, so operators can ask
    -- "which tenant is the backlog for" with a SELECT.
    producer          text,
    occurred_at       timestamptz,
    correlation_id    text,
    causation_id      text,
    tenant            text,
    partition_key     text,
    ordering_key      text,
    traceparent       text,
    tracestate        text,
    baggage           text,
    schema_subject    text,
    schema_uri        text,

    -- The Kafka key. A plain column kept by a trigger (V002), never a
    -- generated one: pgoutput before PostgreSQL 18 does not replicate
    -- generated columns, so neither Debezium nor the relay would see it.
    routing_key       text        NOT NULL,

    CONSTRAINT ck_outbox_status
        CHECK (status IN ('PENDING', 'IN_FLIGHT', 'PUBLISHED', 'AMBIGUOUS', 'FAILED', 'EXHAUSTED'))
);

-- What a polling relay claims: partial, because PUBLISHED rows accumulate
-- until retention removes them; IN_FLIGHT included because a relay that died
-- mid-publish leaves rows in that state.
CREATE INDEX IF NOT EXISTS {{table}}_claimable_idx
    ON {{schema}}.{{table}} (created_at)
    WHERE status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT');

-- What retention deletes, in bounded batches.
CREATE INDEX IF NOT EXISTS {{table}}_published_idx
    ON {{schema}}.{{table}} (published_at)
    WHERE status = 'PUBLISHED';
