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
# running. They start (installs, JVMs) while the linted build runs.
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

# One compilation, linted as it compiles: clippy's driver is the compiler
# of the workspace's own crates (what `cargo clippy` does, but building
# instead of only checking), so the lints and the test build do not compile
# the tree twice. Every cargo below keeps these variables, so nothing is
# built again; the shipped artifacts' release build drops them.
step "building every target with clippy's lints (-D warnings): one compilation for both"
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
build_log=$(mktemp)
cargo test --workspace --all-targets --no-run 2>&1 | tee "$build_log"
# A test executable by its crate's root file (`tests/it/main.rs`): run
# directly, several at once (a cargo running one would hold the target
# directory's lock and the next would wait for it).
exe() {
  local path
  path=$(sed -n "s|.*Executable $1 (\(.*\))|\1|p" "$build_log" | head -1)
  [ -x "$path" ] || { echo "cannot find the executable of $1" >&2; exit 1; }
  echo "$path"
}
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
  unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
  export CARGO_TARGET_DIR=$PWD/target/ship
  nice -n 19 scripts/book.sh install
  nice -n 19 scripts/image.sh >"$image_file"
  nice -n 19 scripts/chart-check.sh
  nice -n 19 scripts/deb.sh tools
) >"$artifacts_log" 2>&1 &
artifacts=$!

step "the tests on PostgreSQL 15 (unit, integration, failover beside them, then transactional delivery's restarts; packaging, drift of connector-config/ and snapshots/)"
log=$(mktemp)
status=0
# Libraries, binaries and tests; the benches are run by hand, never here.
# The image's tests run once the image is built, at the end, and so does
# the user guide's build and link check (book::), once mdBook is installed.
# The network faults (tests/network) run after it, beside the matrix.
# The restart tests (tests/faults) run on the newest major, in the matrix;
# here only transactional delivery's, whose point is on Kafka's side (and
# the soak restarts PostgreSQL 15 and Kafka again and again).
it_bin=$(exe tests/it/main.rs)
failover_bin=$(exe tests/failover/main.rs)
faults_bin=$(exe tests/faults/main.rs)
network_bin=$(exe tests/network/main.rs)
cluster_bin=$(exe tests/cluster/main.rs)
rm -f "$build_log"

# Runs a test executable in the background with its output in a file of
# its own; `joined PID FILE` waits for it and adds the output to the log.
joined() {
  wait "$1" || status=$?
  tee -a "$log" <"$2"
  rm -f "$2"
}

# The primary failover runs beside the integration tests: its clusters are
# its own, and it restarts nothing shared.
failover_log=$(mktemp)
"$failover_bin" >"$failover_log" 2>&1 &
failover=$!
cargo test --lib --bins --test architecture --test packaging 2>&1 | tee "$log" || status=$?
"$it_bin" --skip image:: --skip book:: 2>&1 | tee -a "$log" || status=$?
joined "$failover" "$failover_log"
"$faults_bin" transactional_delivery 2>&1 | tee -a "$log" || status=$?

# The network faults (PostgreSQL 15 and Kafka through Toxiproxy) run beside
# the matrix's first majors: they wait on timeouts and the network, not on
# the CPU, and their faults touch only the proxied connections. The soak
# restarts PostgreSQL and Kafka, so it runs after the matrix, alone.
step "network faults (PostgreSQL 15 through Toxiproxy), beside the matrix"
network_log=$(mktemp)
"$network_bin" --skip soak:: >"$network_log" 2>&1 &
network=$!

# The core of the suite on each other major: migrations, the replication
# reader, the relay end to end (per-key order, SIGKILLs, FAILED rows), the
# exclusivity rules and `check`; and on the newest major the Debezium
# parity test and the PostgreSQL and Kafka restarts. Two majors at a time,
# each on its own cluster and port (Kafka and Connect are shared; every
# test works on topics and slots of its own).
CORE_TESTS=(migrations:: replication:: relay:: exclusivity:: commands::)
NEWEST=18
pg() { OUTBOX_TEST_PG_MAJOR=$1 env -u OUTBOX_TEST_PG_PORT scripts/services.sh "$2"; }
on_major() {
  local major=$1 tests=("${CORE_TESTS[@]}")
  # The converter cases decide bytes after the database: 15 runs them.
  if [ "$major" = "$NEWEST" ]; then tests+=(debezium:: --skip debezium::router::converters::); fi
  (
    eval "$(OUTBOX_TEST_PG_MAJOR=$major env -u OUTBOX_TEST_PG_PORT scripts/services.sh env)"
    echo "PostgreSQL $major: ${tests[*]}"
    "$it_bin" "${tests[@]}"
  )
}
majors=(${OUTBOX_TEST_PG_MAJORS-14 16 17 18})
for ((i = 0; i < ${#majors[@]}; i += 2)); do
  pair=("${majors[@]:i:2}")
  step "PostgreSQL ${pair[*]}: the core of the suite, side by side"
  jobs_=() logs_=()
  for major in "${pair[@]}"; do
    pg "$major" start-postgres
  done
  for major in "${pair[@]}"; do
    logs_+=("$(mktemp)")
    on_major "$major" >"${logs_[-1]}" 2>&1 &
    jobs_+=($!)
  done
  for j in "${!jobs_[@]}"; do joined "${jobs_[$j]}" "${logs_[$j]}"; done
  for major in "${pair[@]}"; do
    [ "$major" = "$NEWEST" ] || pg "$major" stop-postgres
  done
done
# The restart tests on the newest major (the soak restarts 15 again and
# again): they restart Kafka, so everything beside them must be done.
# Transactional delivery's restart test ran on 15.
joined "$network" "$network_log"

# The Kafka cluster's faults (three brokers, replication factor 3,
# min.insync.replicas=2; PostgreSQL 15) run beside the restarts: they touch
# only the cluster and its own proxies, and the restarts only the single
# broker and PostgreSQL 18. The soak after them resets every proxy, so they
# are joined before it.
step "the Kafka cluster's faults, each in both delivery modes (tests/cluster), beside the restarts"
cluster_began=$SECONDS
scripts/services.sh start-cluster
cluster_log=$(mktemp)
"$cluster_bin" >"$cluster_log" 2>&1 &
cluster=$!
if [[ " ${majors[*]} " == *" $NEWEST "* ]]; then
  step "PostgreSQL $NEWEST: the restarts of PostgreSQL and Kafka"
  (
    eval "$(OUTBOX_TEST_PG_MAJOR=$NEWEST env -u OUTBOX_TEST_PG_PORT scripts/services.sh env)"
    "$faults_bin" --skip transactional_delivery
  ) 2>&1 | tee -a "$log" || status=$?
  pg "$NEWEST" stop-postgres
fi
joined "$cluster" "$cluster_log"
echo "the Kafka cluster's faults took $((SECONDS - cluster_began)) s" >&2
scripts/services.sh stop-cluster
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
  step "the image's tests ($OUTBOX_TEST_IMAGE, PostgreSQL 15; testcontainers through podman's API socket)"
  DOCKER_HOST=$(scripts/podman.sh socket)
  export DOCKER_HOST
  cargo test --test it --no-fail-fast -- image:: 2>&1 | tee -a "$log" || status=$?
  step "the user guide: mdBook build and link check (tests/it/book.rs)"
  cargo test --test it --no-fail-fast -- book:: 2>&1 | tee -a "$log" || status=$?
  step "Debian package (scripts/deb.sh)"
  # The release build the image's step made, without clippy's driver (a
  # build with it would be another build).
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS CARGO_TARGET_DIR="$PWD/target/ship" scripts/deb.sh || status=$?
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
