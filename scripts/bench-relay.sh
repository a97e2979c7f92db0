#!/usr/bin/env bash
# Relay throughput and peak memory on the local services: a backlog of ROWS
# outbox rows (PAYLOAD bytes each) written while the relay is stopped, then
# drained by `outbox-cdc run` (release build). Throughput counts from the
# relay's start until the slot is confirmed past the last row, so every
# message is acknowledged by Kafka. Not a test: it asserts nothing.
#
#   scripts/bench-relay.sh [ROWS] [PAYLOAD] [ROWS_PER_TRANSACTION]
#
# BENCH_KAFKA_PROPERTIES adds librdkafka properties and BENCH_RELAY_SETTINGS
# [relay] settings (TOML lines), e.g.
#   BENCH_KAFKA_PROPERTIES='"linger.ms" = "50"' scripts/bench-relay.sh
#   BENCH_RELAY_SETTINGS='mark_published = false' scripts/bench-relay.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rows=${1:-200000}
payload=${2:-500}
per_tx=${3:-100}

scripts/services.sh start >/dev/null
eval "$(scripts/services.sh env)"
export PGPASSWORD=$OUTBOX_TEST_PG_PASSWORD
q() { psql -X -q -v ON_ERROR_STOP=1 -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" "$@"; }
db=bench_relay
slot=bench_relay
dir=.cache/bench
mkdir -p "$dir"
cargo build --release --quiet
bin=target/release/outbox-cdc

q -d postgres -c "SELECT pg_drop_replication_slot('$slot') FROM pg_replication_slots WHERE slot_name = '$slot'" >/dev/null
q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
prefix="bench$(date +%s)."
cat >"$dir/relay.toml" <<TOML
[postgres]
host = "$OUTBOX_TEST_PG_HOST"
port = $OUTBOX_TEST_PG_PORT
dbname = "$db"
user = "$OUTBOX_TEST_PG_USER"
password = { env = "OUTBOX_TEST_PG_PASSWORD" }
sslmode = "disable"
slot = "$slot"

[outbox]
topic_prefix = "$prefix"

[kafka]
bootstrap_servers = "$OUTBOX_TEST_KAFKA_BOOTSTRAP"

[kafka.properties]
${BENCH_KAFKA_PROPERTIES:-}

[relay]
create_slot = true
${BENCH_RELAY_SETTINGS:-}
TOML
"$bin" migrate --config "$dir/relay.toml" 2>/dev/null
q -d "$db" -c "SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
q -d "$db" -c "INSERT INTO outbox_relay_mode (outbox_table, mode) VALUES ('public.messaging_outbox', 'CHANGE_DATA_CAPTURE')" >/dev/null

echo "writing $rows rows of $payload bytes in transactions of $per_tx rows" >&2
start=$(date +%s.%N)
q -d "$db" -c "
DO \$\$
DECLARE i int := 0;
BEGIN
  WHILE i < $rows LOOP
    INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, tenant, correlation_id)
    SELECT md5('b' || g)::uuid, 'orders', 'OrderPlaced', 1, 'application/json', convert_to(repeat('x', $payload), 'UTF8'),
           'customer-' || (g % 1000), 'acme', 'corr-' || g
    FROM generate_series(i + 1, least(i + $per_tx, $rows)) g;
    COMMIT;
    i := i + $per_tx;
  END LOOP;
END \$\$;"
target=$(q -d "$db" -Atc "SELECT pg_current_wal_lsn()")
echo "backlog written in $(echo "$(date +%s.%N) - $start" | bc) s; draining to $target" >&2

t0=$(date +%s.%N)
/usr/bin/time -v "$bin" run --config "$dir/relay.toml" 2>"$dir/relay.log" &
pid=$!
until [ "$(q -d "$db" -Atc "SELECT confirmed_flush_lsn >= '$target' FROM pg_replication_slots WHERE slot_name = '$slot'")" = t ]; do
  sleep 0.05
done
t1=$(date +%s.%N)
relay=$(pgrep -P $pid -f "outbox-cdc run" || true)
cpu=$(awk '{print ($14+$15)/100}' /proc/${relay:-$pid}/stat 2>/dev/null || echo "?")
kill -TERM ${relay:-$pid}
wait $pid || true
secs=$(echo "$t1 - $t0" | bc)
rss=$(grep "Maximum resident set size" "$dir/relay.log" | awk '{print $NF}')
echo "relay: $rows messages in $secs s = $(echo "$rows / $secs" | bc) msg/s; peak RSS ${rss} KiB; CPU ${cpu} s"
q -d postgres -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null
