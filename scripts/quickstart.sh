#!/usr/bin/env bash
# Quickstart on local services: installs and starts only PostgreSQL 15 and
# Kafka (left running; `scripts/services.sh stop` stops them), builds the
# binary (the `quickstart` profile: no optimization, no debug information,
# what compiles fastest; the release build's link-time optimization alone
# takes longer than the whole demo, and the image and the package ship it),
# creates a demo database, migrates it, generates the
# Debezium configuration, runs the relay, inserts sample rows and shows the
# records as they arrive in Kafka.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The build and the services' installs go side by side. OUTBOX_CDC_BIN runs
# a binary already built instead (the test suite runs the quickstart with
# the one its tests ran).
build_log=.cache/quickstart/build.log
mkdir -p .cache/quickstart
scripts/build-prerequisites.sh
bin=${OUTBOX_CDC_BIN:-target/quickstart/outbox-cdc}
build=
if [ -z "${OUTBOX_CDC_BIN:-}" ]; then
  cargo build --quiet --profile quickstart --bin outbox-cdc >"$build_log" 2>&1 &
  build=$!
fi
scripts/services.sh start-core
eval "$(scripts/services.sh env)"
if [ -n "$build" ]; then wait $build || { cat "$build_log" >&2; exit 1; }; fi
export PGPASSWORD=$OUTBOX_TEST_PG_PASSWORD
psql_demo() { psql -X -q -v ON_ERROR_STOP=1 -h "$OUTBOX_TEST_PG_HOST" -p "$OUTBOX_TEST_PG_PORT" -U "$OUTBOX_TEST_PG_USER" "$@"; }

if ! psql_demo -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'outbox_demo'" | grep -q 1; then
  psql_demo -d postgres -c "CREATE DATABASE outbox_demo"
fi

config=.cache/quickstart/outbox-cdc.toml
cat >"$config" <<TOML
[postgres]
host = "$OUTBOX_TEST_PG_HOST"
port = $OUTBOX_TEST_PG_PORT
dbname = "outbox_demo"
user = "$OUTBOX_TEST_PG_USER"
password = { env = "OUTBOX_TEST_PG_PASSWORD" }
sslmode = "disable"

[outbox]
topic_prefix = "outbox."

[kafka]
bootstrap_servers = "$OUTBOX_TEST_KAFKA_BOOTSTRAP"

[http]
listen = "127.0.0.1:9187"
TOML

echo "==> outbox-cdc migrate"
"$bin" migrate --config "$config"
echo "==> outbox-cdc connector-config (.cache/quickstart/debezium.properties)"
"$bin" connector-config --config "$config" --out .cache/quickstart/debezium.properties
grep -E '^(slot.name|publication.name|transforms.outbox.table.field.event.key|transforms.outbox.route.topic.replacement)=' \
  .cache/quickstart/debezium.properties

echo "==> outbox-cdc cutover --to cdc (fences polling claims, creates the slot, hands the backlog over)"
"$bin" cutover --config "$config" --to cdc
echo "==> outbox-cdc run (log: .cache/quickstart/relay.log)"
"$bin" run --config "$config" 2>.cache/quickstart/relay.log &
relay=$!
trap 'kill -TERM $relay 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  active=$(psql_demo -d outbox_demo -Atc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'outbox_cdc_relay' AND active")
  [ "$active" = 1 ] && break
  kill -0 $relay 2>/dev/null || { cat .cache/quickstart/relay.log >&2; exit 1; }
  sleep 0.2
done

echo "==> sample rows"
psql_demo -d outbox_demo <<'SQL'
INSERT INTO messaging_outbox (message_id, destination, message_type, message_version, content_type, payload, partition_key, tenant)
VALUES (gen_random_uuid(), 'orders', 'OrderPlaced', 1, 'application/json', convert_to('{"order":42}', 'UTF8'), 'customer-7', 'acme'),
       (gen_random_uuid(), 'orders', 'OrderPaid', 1, 'application/json', convert_to('{"order":42}', 'UTF8'), 'customer-7', 'acme'),
       (gen_random_uuid(), 'payments', 'PaymentCaptured', 2, 'application/json', convert_to('{"amount":10}', 'UTF8'), NULL, NULL);
SQL

# The relay creates the topics with their first records.
for _ in $(seq 1 100); do
  pending=$(psql_demo -d outbox_demo -Atc "SELECT count(*) FROM messaging_outbox WHERE status = 'PENDING'")
  [ "$pending" = 0 ] && break
  sleep 0.2
done

echo "==> the records in Kafka (outbox-cdc tail)"
"$bin" tail --config "$config" orders --from-beginning --idle-timeout-secs 5
"$bin" tail --config "$config" payments --from-beginning --idle-timeout-secs 5

echo "==> what an on-call engineer sees (curl 127.0.0.1:9187/readyz and /metrics)"
curl -s 127.0.0.1:9187/readyz
curl -s 127.0.0.1:9187/metrics | grep -E '^outbox_cdc_(records_published_total\{|seconds_behind_source |slot_wal_status\{status="reserved"\} |ready )'

echo "==> rows after publication"
psql_demo -d outbox_demo -c "SELECT message_id, 'outbox.' || destination AS topic, routing_key, status, published_at FROM messaging_outbox ORDER BY created_at DESC LIMIT 6"

kill -TERM $relay
wait $relay || true
trap - EXIT
echo
echo "Configuration: $config   Relay log: .cache/quickstart/relay.log"
echo "Stop the services with: scripts/services.sh stop"
