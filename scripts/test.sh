#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine:
# formatting, lints, unit and integration tests (against a real PostgreSQL 15
# and a real Kafka broker, which this script installs, starts and stops), the
# check that the committed Debezium configuration matches the definition, the
# shipped artifacts (the container image and its tests under podman, the
# Helm chart, the Debian package), and the version matrix: the core of the
# suite again on PostgreSQL 14, 16, 17 and 18, and the Debezium parity test
# on 18, the newest major Debezium 3.6.1 is tested against (its connector's
# pom.xml has profiles postgres-14 to -18).
#
# OUTBOX_TEST_PG_MAJORS="14 16 17 18" picks the matrix's majors (all of them
# unless set; an empty value runs PostgreSQL 15 only, for quick local runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# Build prerequisites of rdkafka's bundled librdkafka (C toolchain, OpenSSL).
scripts/build-prerequisites.sh

# Snapshots are compared, never written, by this command.
export INSTA_UPDATE=no

step "cargo fmt --check"
cargo fmt --all -- --check

# Services: a fresh set in CI; locally, reuse running ones and leave them
# running. They start (installs, JVMs) while clippy and the build run.
started=0
if [ -n "${CI:-}" ]; then scripts/services.sh reset; fi
running=$(scripts/services.sh status)
case "$running" in
  *"postgresql: running"*"kafka: running"*) ;;
  *) started=1 ;;
esac
cleanup() { if [ "$started" = 1 ]; then scripts/services.sh stop || true; fi; }
trap cleanup EXIT
step "starting PostgreSQL and Kafka in the background"
services_log=$(mktemp)
scripts/services.sh start >"$services_log" 2>&1 &
services=$!

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step "building the tests"
cargo test --lib --bins --tests --no-run
if ! wait "$services"; then cat "$services_log" >&2; exit 1; fi
cat "$services_log" >&2
rm -f "$services_log"
eval "$(scripts/services.sh env)"

# The shipped artifacts are built beside the tests, once the tests are
# built, at the lowest priority (so they take the machine's idle time while
# the tests wait on the services, not the tests' build), in a target
# directory of their own: the release build and the container image, the
# Helm chart's checks, the Debian package's tools. Their results are read
# at the end.
step "building the shipped artifacts in the background (image, chart, package tools, the guide's mdBook)"
artifacts_log=$(mktemp)
image_file=$(mktemp)
(
  export CARGO_TARGET_DIR=$PWD/target/ship
  nice -n 19 scripts/book.sh install
  nice -n 19 scripts/image.sh >"$image_file"
  nice -n 19 scripts/chart-check.sh
  nice -n 19 scripts/deb.sh tools
) >"$artifacts_log" 2>&1 &
artifacts=$!

step "cargo test on PostgreSQL 15 (unit, integration, failover, restarts, packaging, drift of connector-config/ and snapshots/)"
log=$(mktemp)
status=0
# Libraries, binaries and tests; the benches are run by hand, never here.
# The image's tests run once the image is built, at the end, and so does
# the user guide's build and link check (book::), once mdBook is installed.
# The network faults (tests/network) run after it, beside the matrix.
# The restart tests (tests/faults) run on the newest major, in the matrix;
# here only transactional delivery's, whose point is on Kafka's side (and
# the soak restarts PostgreSQL 15 and Kafka again and again).
targets=()
for main in tests/*/main.rs; do
  name=$(basename "$(dirname "$main")")
  case "$name" in
    network | faults) ;;
    *) targets+=(--test "$name") ;;
  esac
done
cargo test --lib --bins "${targets[@]}" --no-fail-fast -- --skip image:: --skip book:: 2>&1 | tee "$log" || status=$?
cargo test --test faults --no-fail-fast -- transactional_delivery 2>&1 | tee -a "$log" || status=$?

# The network faults (PostgreSQL 15 and Kafka through Toxiproxy) run beside
# the matrix's first majors: they wait on timeouts and the network, not on
# the CPU, and their faults touch only the proxied connections. The soak
# restarts PostgreSQL and Kafka, so it runs after the matrix, alone.
step "network faults (PostgreSQL 15 through Toxiproxy), beside the matrix"
network_log=$(mktemp)
# The test executable itself: a cargo running it would hold the target
# directory's lock, and the matrix's cargo would wait for it.
network_bin=$(cargo test --test network --no-run 2>&1 | sed -n 's/.*Executable tests\/network\/main.rs (\(.*\))/\1/p')
[ -x "$network_bin" ] || { echo "cannot find the network tests' executable" >&2; exit 1; }
"$network_bin" --skip soak:: >"$network_log" 2>&1 &
network=$!
network_done() {
  if [ -n "$network" ]; then
    wait "$network" || status=$?
    tee -a "$log" <"$network_log"
    rm -f "$network_log"
    network=
  fi
}

# The core of the suite on each other major: migrations, the replication
# reader, the relay end to end (per-key order, SIGKILLs, FAILED rows), the
# exclusivity rules and `check`; and on the newest major the Debezium
# parity test and the PostgreSQL and Kafka restarts.
CORE_TESTS=(migrations:: replication:: relay:: exclusivity:: commands::)
NEWEST=18
for major in ${OUTBOX_TEST_PG_MAJORS-14 16 17 18}; do
  step "PostgreSQL $major: the core of the suite"
  # Each major has its own cluster and port; Kafka and Connect are shared.
  OUTBOX_TEST_PG_MAJOR=$major env -u OUTBOX_TEST_PG_PORT scripts/services.sh start-postgres
  eval "$(OUTBOX_TEST_PG_MAJOR=$major env -u OUTBOX_TEST_PG_PORT scripts/services.sh env)"
  tests=("${CORE_TESTS[@]}")
  if [ "$major" = "$NEWEST" ]; then tests+=(debezium::); fi
  cargo test --test it --no-fail-fast -- "${tests[@]}" 2>&1 | tee -a "$log" || status=$?
  # The restart tests on the newest major (the soak restarts 15 again and
  # again): they restart Kafka, so the network tests must be done first.
  # Transactional delivery's restart test ran on 15.
  if [ "$major" = "$NEWEST" ]; then
    network_done
    cargo test --test faults --no-fail-fast -- --skip transactional_delivery 2>&1 | tee -a "$log" || status=$?
  fi
  OUTBOX_TEST_PG_MAJOR=$major env -u OUTBOX_TEST_PG_PORT scripts/services.sh stop-postgres
done
network_done
eval "$(OUTBOX_TEST_PG_MAJOR=15 env -u OUTBOX_TEST_PG_PORT scripts/services.sh env)"
step "the short nemesis soak, both delivery modes (PostgreSQL 15 through Toxiproxy)"
"$network_bin" soak:: 2>&1 | tee -a "$log" || status=$?

# The README's first command, end to end, with the binary the tests ran
# (its own build, the quickstart profile, is a plain cargo build).
step "the quickstart (scripts/quickstart.sh, the README's first command)"
quickstart_log=$(mktemp)
if OUTBOX_CDC_BIN=$PWD/target/debug/outbox-cdc scripts/quickstart.sh >"$quickstart_log" 2>&1; then
  tail -5 "$quickstart_log"
else
  cat "$quickstart_log" >&2
  echo "the quickstart failed" >&2
  status=1
fi
rm -f "$quickstart_log"

step "the shipped artifacts: image (scripts/image.sh), chart (scripts/chart-check.sh)"
if wait "$artifacts"; then
  cat "$artifacts_log" >&2
  OUTBOX_TEST_IMAGE=$(head -1 "$image_file")
  export OUTBOX_TEST_IMAGE
  step "the image's tests ($OUTBOX_TEST_IMAGE, PostgreSQL 15)"
  cargo test --test it --no-fail-fast -- image:: 2>&1 | tee -a "$log" || status=$?
  step "the user guide: mdBook build and link check (tests/it/book.rs)"
  cargo test --test it --no-fail-fast -- book:: 2>&1 | tee -a "$log" || status=$?
  step "Debian package (scripts/deb.sh)"
  CARGO_TARGET_DIR=$PWD/target/ship scripts/deb.sh || status=$?
else
  cat "$artifacts_log" >&2
  echo "building or checking the shipped artifacts failed" >&2
  status=1
fi
rm -f "$artifacts_log" "$image_file"

passed=$(awk '/^test result:/ {sub(";","",$4); p+=$4} END {print p+0}' "$log")
failed=$(awk '/^test result:/ {sub(";","",$6); f+=$6} END {print f+0}' "$log")
rm -f "$log"
cleanup
trap - EXIT
echo
step "done"
echo "tests: $passed passed, $failed failed"
exit "$status"
