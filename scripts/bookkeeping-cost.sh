#!/usr/bin/env bash
# What each way of recording "this row went out" costs PostgreSQL: server
# time per row, WAL per row, and the time logical decoding (pgoutput, the
# relay's publication) takes to read that WAL. 200 000 outbox rows of 500
# bytes, bookkept in 40 statements of 5 000 ids, as the relay batches them.
#
#   scripts/services.sh start && scripts/bookkeeping-cost.sh
#
# Variants: `mark` (UPDATE status = 'PUBLISHED', the per-row mark), `hot`
# (the same UPDATE with the polling indexes dropped and fillfactor 50, so it
# can be HOT), `side` (one narrow row per id in a side table with a key) and
# `journal` (one row holding the 5 000 ids as an array: what the relay does).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh env)"
. scripts/sql-only-config.sh
export PGPASSWORD="$OUTBOX_TEST_PG_PASSWORD"
db=bookkeeping_cost
psql_() { psql -X -q -A -F, -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
cargo build --release --quiet
config=$(mktemp)
trap 'rm -f "$config"' EXIT
write_sql_only_config "$config" "$db"

echo "variant,server_us_per_row,wal_bytes_per_row,decode_us_per_row,hot_updates"
for variant in mark hot side journal; do
    psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
    target/release/outbox-cdc migrate --config "$config" > /dev/null 2>&1
    psql_ -d "$db" > /dev/null <<'SQL'
INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
SELECT gen_random_uuid(), 'orders', 'T', 1, 'application/json', convert_to(repeat('x', 500), 'UTF8'), 'k' || (g % 100)
  FROM generate_series(1, 200000) g;
CREATE TABLE ids_chunks AS
SELECT n / 5000 AS chunk, array_agg(message_id) AS ids
  FROM (SELECT message_id, row_number() OVER () - 1 AS n FROM messaging_outbox) s GROUP BY 1;
CREATE TABLE side (message_id uuid PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
SQL
    if [ "$variant" = hot ]; then
        psql_ -d "$db" -c "DROP INDEX messaging_outbox_claimable_idx" -c "DROP INDEX messaging_outbox_published_idx" \
            -c "ALTER TABLE messaging_outbox SET (fillfactor = 50)" -c "VACUUM FULL messaging_outbox"
    fi
    psql_ -d "$db" -c "VACUUM ANALYZE" -c "CHECKPOINT" -c "SELECT pg_create_logical_replication_slot('bookkeeping_cost', 'pgoutput')" > /dev/null
    case "$variant" in
        mark|hot) prepare="PREPARE m(uuid[]) AS UPDATE messaging_outbox SET status = 'PUBLISHED', published_at = now() WHERE status = 'PENDING' AND message_id = ANY(\$1);" ;;
        side) prepare="PREPARE m(uuid[]) AS INSERT INTO side (message_id) SELECT unnest(\$1);" ;;
        journal) prepare="PREPARE m(uuid[]) AS INSERT INTO outbox_cdc_published (outbox_table, message_ids) VALUES ('public.messaging_outbox', \$1);" ;;
    esac
    {
        echo "$prepare"
        echo "SELECT pg_current_wal_insert_lsn() AS start \\gset"
        echo "SELECT 0::float8 AS spent \\gset"
        for chunk in $(seq 0 39); do
            echo "SELECT ids AS a FROM ids_chunks WHERE chunk = $chunk \\gset"
            echo "SELECT clock_timestamp() AS t0 \\gset"
            echo "EXECUTE m(:'a');"
            echo "SELECT :spent + extract(epoch FROM clock_timestamp() - :'t0') AS spent \\gset"
        done
        echo "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'start') / 200000 AS wal \\gset"
        echo "SELECT clock_timestamp() AS t1 \\gset"
        echo "SELECT count(*) FROM pg_logical_slot_get_binary_changes('bookkeeping_cost', NULL, NULL, 'proto_version', '1', 'publication_names', 'outbox_cdc_publication') \\gset"
        echo "SELECT '$variant', round((:spent * 1e6 / 200000)::numeric, 2), round(:wal), round((extract(epoch FROM clock_timestamp() - :'t1') * 1e6 / 200000)::numeric, 2),"
        echo "       (SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'messaging_outbox');"
        echo "SELECT pg_drop_replication_slot('bookkeeping_cost') \\gset"
    } | psql_ -d "$db" -t
done
psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
