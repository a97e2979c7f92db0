#!/usr/bin/env bash
# outbox-cdc and Debezium side by side on the local services, with the raw
# slot-read and raw-produce baselines, all in one run. Writes
# docs/benchmark.json and docs/benchmark.md. Not a test: it asserts nothing.
#
#   scripts/bench.sh [--rows N] [--payload BYTES] [--tx-sizes 1,100]
#                    [--rates MSG_PER_S,...] [--seconds S] [--partitions N]
#                    [--repeat N] [--out DIR] [--traceparent sampled|none]
#                    [--contract messaging|debezium]
#                    [--only baselines,backlog,steady,instructions,bigtx,profile,curves,replication]
#
# Defaults: 200 000 rows of about 500 bytes, transactions of 1 and of 100
# rows, steady streams of 100 msg/s (one writer) and 2 000 msg/s (eight)
# for 20 s, every scenario five times, 6 partitions, a profile of a
# 1 000 000-row drain, the replication scenario (a backlog and the 2 000
# msg/s stream on the single broker and on the three-broker cluster, taking
# turns), results in docs/. BENCH_DEBEZIUM_PROPERTIES=key=value,... changes Debezium's tuning;
# BENCH_RELAY_SETTINGS and BENCH_KAFKA_PROPERTIES add TOML lines to the
# relay's [relay] and [kafka.properties] tables, e.g.
#   BENCH_RELAY_SETTINGS='max_in_flight_messages = 5000' scripts/bench.sh --only backlog
# To compare two builds of the relay in one run, point BENCH_BASELINE_BIN at
# the other build's binary and add the engine `outbox-cdc-baseline`, e.g.
#   BENCH_BASELINE_BIN=../old/target/release/outbox-cdc \
#     scripts/bench.sh --only backlog --engines outbox-cdc,outbox-cdc-baseline --out /tmp/compare
# BENCH_BASELINE_SETTINGS adds [relay] lines to that engine alone; without
# BENCH_BASELINE_BIN it runs this build, so two settings compare run for
# run, e.g.
#   BENCH_BASELINE_SETTINGS='max_in_flight_messages = 10000' \
#     scripts/bench.sh --only backlog --engines outbox-cdc,outbox-cdc-baseline --out /tmp/window
# The rows carry a sampled traceparent unless --traceparent none: what
# tracing costs at its default sampling is measured on rows without one, e.g.
#   scripts/bench.sh --only backlog,instructions --traceparent none \
#     --engines outbox-cdc,outbox-cdc-otel,outbox-cdc-otel-default --out /tmp/otel
# --contract debezium runs the backlogs and steady streams on Debezium's
# documented outbox table (public.outboxevent, each transaction deleting the
# rows it inserts: a table that keeps no status), e.g.
#   scripts/bench.sh --contract debezium --only backlog \
#     --engines outbox-cdc,outbox-cdc-transactional,debezium,debezium-exactly-once \
#     --rows 100000 --repeat 3 --out docs/delivery-modes/no-status
# Settings other than the defaults are recorded in the results.
# Services this script started are stopped at the end; the Kafka Connect
# worker is started and stopped by the bench itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --render-only rewrites the table and the charts from the results file:
# no service is needed.
case " $* " in
  *" --render-only "*) exec cargo bench --bench relay_vs_debezium -- "$@" ;;
esac

# The profile's tools: perf (Debian's linux-perf) and inferno, which folds
# its samples into the flame graph.
if ! command -v perf >/dev/null; then
  apt-get install -y -q linux-perf >&2
fi
export BENCH_INFERNO_DIR="$PWD/.cache/cargo/bin"
if [ ! -x "$BENCH_INFERNO_DIR/inferno-flamegraph" ]; then
  cargo install --locked --quiet inferno --version 0.12.8 --root "$PWD/.cache/cargo" >&2
fi

was_running=$(scripts/services.sh status | grep -c ': running' || true)
cluster_was_running=$(scripts/services.sh status | grep -c '^cluster broker .*: running' || true)
scripts/services.sh start >&2
# The OpenTelemetry Collector the traced engine exports to (built once).
scripts/services.sh tools otelcol >&2
# The replication scenario (in a full run, or named in --only) runs on the
# three-broker cluster too.
only=""
prev=""
for arg in "$@"; do
  if [ "$prev" = --only ]; then only=$arg; fi
  prev=$arg
done
case ",${only:-replication}," in
  *,replication,*) scripts/services.sh start-cluster >&2 ;;
esac
eval "$(scripts/services.sh env)"
cleanup() {
  if [ "$was_running" = 0 ]; then
    scripts/services.sh stop >&2
  elif [ "$cluster_was_running" = 0 ]; then
    scripts/services.sh stop-cluster >&2
  fi
}
trap cleanup EXIT
# Relay, broker and worker share this machine; nothing else of ours runs.
scripts/services.sh stop-connect >&2

export BENCH_COMMAND="scripts/bench.sh${*:+ $*}"
cargo bench --bench relay_vs_debezium -- "$@"
