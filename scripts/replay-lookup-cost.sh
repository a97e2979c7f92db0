#!/usr/bin/env bash
# What the replay lookup costs PostgreSQL: after a restart, idempotent
# delivery with PUBLISHED marks on asks, per chunk of 100 replayed rows,
# which of them are PUBLISHED in the table or listed in the newest 16
# journal entries (`pg::journal::PublishedAmong`), until the replay is past
# what an earlier session can have published. This times that statement
# with pgbench on a table of 1 000 000 rows (half PUBLISHED), for a journal
# as a steady stream leaves it (16 entries of 250 ids) and as full as it
# gets (16 entries of 5 000 ids, behind 200 older ones).
#
#   scripts/services.sh start-core && scripts/replay-lookup-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh env)"
. scripts/sql-only-config.sh
export PGPASSWORD="$OUTBOX_TEST_PG_PASSWORD"
db=replay_lookup_cost
psql_() { psql -X -q -A -t -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"; psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true' EXIT
write_sql_only_config "$work/config.toml" "$db"
psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
target/release/outbox-cdc migrate --config "$work/config.toml" > /dev/null 2>&1
psql_ -d "$db" <<'SQL'
INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key)
SELECT gen_random_uuid(), 'orders', 'T', 1, 'application/json', '\x01', 'k' || (g % 200)
  FROM generate_series(1, 1000000) g;
UPDATE messaging_outbox SET status = 'PUBLISHED' WHERE ('x' || left(message_id::text, 1))::bit(4)::int % 2 = 0;
CREATE TABLE probe AS
SELECT row_number() OVER () AS n, message_id
  FROM (SELECT message_id FROM messaging_outbox ORDER BY random() LIMIT 2000) s;
VACUUM ANALYZE;
SQL

# The relay's statement, with each chunk's ids as the literal a custom plan
# sees for its parameter.
for i in $(seq 0 19); do
    ids=$(psql_ -d "$db" -c "SELECT '{' || string_agg(message_id::text, ',') || '}' FROM probe WHERE n > $((i * 100)) AND n <= $((i * 100 + 100))")
    cat > "$work/chunk$i.sql" <<SQL
SELECT t.message_id FROM public.messaging_outbox t
 WHERE t.message_id = ANY('$ids'::uuid[]) AND t.status = 'PUBLISHED'
UNION
SELECT j.m FROM (
    SELECT unnest(message_ids) AS m FROM (
        SELECT message_ids FROM public.outbox_cdc_published WHERE outbox_table = 'public.messaging_outbox'
         ORDER BY recorded_at DESC LIMIT 16) recent) j
 WHERE j.m = ANY('$ids'::uuid[]);
SQL
done
scripts=()
for f in "$work"/chunk*.sql; do scripts+=(-f "$f"); done

journal() {
    psql_ -d "$db" -c "TRUNCATE outbox_cdc_published" -c "
INSERT INTO outbox_cdc_published (outbox_table, recorded_at, message_ids)
SELECT 'public.messaging_outbox', now() - make_interval(secs => e),
       ARRAY(SELECT gen_random_uuid() FROM generate_series(1, CASE WHEN e <= 16 THEN $2 ELSE 5000 END) WHERE e > 0)
  FROM generate_series(1, $1) e" -c "VACUUM ANALYZE outbox_cdc_published"
}

echo "journal,ids_in_journal,ms_per_chunk_of_100"
for shape in "steady 16 250" "full 216 5000"; do
    set -- $shape
    journal "$2" "$3"
    total=$(psql_ -d "$db" -c "SELECT sum(cardinality(message_ids)) FROM outbox_cdc_published")
    ms=$(pgbench -n -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" -d "$db" -T 10 -c 1 "${scripts[@]}" 2>&1 |
        awk '/^latency average/ { print $4 }')
    echo "$1,$total,$ms"
done
