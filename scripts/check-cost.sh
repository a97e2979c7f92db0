#!/usr/bin/env bash
# What the outbox's CHECK constraints cost the application's INSERT: server
# time per single-row INSERT of the benchmark's row (a traceparent, a tenant,
# empty headers), with every constraint, with none, and without each one in
# turn. PostgreSQL prepares CHECK constraints for every statement, so a
# one-row INSERT pays for their expressions whatever the row holds.
#
#   scripts/services.sh start && scripts/check-cost.sh [rounds]
#
# Each figure is the median over the rounds (default 5) of a loop of 5 000
# INSERTs in one transaction that is rolled back, variants interleaved. The
# constraints a variant leaves out are dropped inside that transaction.
# OUTBOX_CDC_BIN picks the binary that migrates the database (to compare
# migrations); by default this tree's release build.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh env)"
. scripts/sql-only-config.sh
export PGPASSWORD="$OUTBOX_TEST_PG_PASSWORD"
db=check_cost
rounds=${1:-5}
rows=5000
psql_() { psql -X -q -A -t -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" -v ON_ERROR_STOP=1 "$@"; }
bin=${OUTBOX_CDC_BIN:-}
if [ -z "$bin" ]; then
    cargo build --release --quiet
    bin=target/release/outbox-cdc
fi
config=$(mktemp)
results=$(mktemp)
trap 'rm -f "$config" "$results"' EXIT
write_sql_only_config "$config" "$db"

psql_ -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
"$bin" migrate --config "$config" > "$results" 2>&1 || { cat "$results" >&2; exit 1; }
: > "$results"
constraints=$(psql_ -d "$db" -c "SELECT conname FROM pg_constraint WHERE conrelid = 'messaging_outbox'::regclass AND contype = 'c' AND conname LIKE 'ck_outbox_%' ORDER BY conname")
variants="all none"
for c in $constraints; do variants="$variants without:$c"; done

# One variant's µs per INSERT: drop what it leaves out, time the loop, roll back.
measure() {
    local variant=$1 drops=""
    case "$variant" in
        all) ;;
        none) for c in $constraints; do drops="$drops ALTER TABLE messaging_outbox DROP CONSTRAINT $c;"; done ;;
        without:*) drops="ALTER TABLE messaging_outbox DROP CONSTRAINT ${variant#without:};" ;;
    esac
    psql_ -d "$db" <<SQL
BEGIN;
$drops
DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    FOR g IN 1..$rows LOOP
        INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload,
                                      partition_key, tenant, traceparent, correlation_id)
        VALUES (gen_random_uuid(), 'orders', 'OrderPlaced', 1, 'application/json',
                convert_to('{"n":' || g || ',"pad":"' || repeat('x', 80) || '"}', 'UTF8'),
                'customer-' || (g % 1000), 'acme', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'corr-' || g);
    END LOOP;
    PERFORM set_config('check_cost.us', (extract(epoch FROM clock_timestamp() - t0) * 1e6 / $rows)::text, true);
END
\$\$;
SELECT current_setting('check_cost.us');
ROLLBACK;
SQL
}

# A first loop warms the server's caches, so the first variant is not charged for them.
measure all > /dev/null
for round in $(seq 1 "$rounds"); do
    for v in $variants; do
        printf '%s %s\n' "$v" "$(measure "$v")" >> "$results"
    done
done

median() { grep "^$1 " "$results" | awk '{print $2}' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
all=$(median all)
echo "variant,us_per_insert,check_cost_us"
for v in $variants; do
    m=$(median "$v")
    case "$v" in
        all) cost="" ;;
        *) cost=$(awk -v a="$all" -v m="$m" 'BEGIN {printf "%.1f", a - m}') ;;
    esac
    printf '%s,%.1f,%s\n' "$v" "$m" "$cost"
done
psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
