#!/usr/bin/env bash
# The seeded nemesis soak: a steady workload (writers committing 1- to 5-row
# transactions over 200 keys at 50 transactions a second), an active relay
# and a standby on the same slot, both through Toxiproxy, and a nemesis that
# injects network faults (black holes, latency, bandwidth, resets on the
# PostgreSQL and the Kafka link) and process faults (relay SIGKILL, walsender
# terminated, PostgreSQL and Kafka restarts) at times drawn from the seed. A
# checker that shares no code with the relay then reads PostgreSQL and Kafka.
#
#   scripts/soak.sh --minutes N --seed S [--delivery idempotent|transactional]
#                   [--kafka single|cluster] [--report DIR]
#
# With --kafka cluster the relays publish to the three-broker cluster
# (`scripts/services.sh start-cluster`, each broker through its own proxy)
# and the nemesis draws the cluster's faults (the busiest partition's
# leader killed for 20 s, a rolling restart, every leader moved, the leader
# frozen for 40 s, two brokers down for 20 s, the relays' link to the
# leader cut for 20 s) in place of the single broker's.
#
# The report (Markdown and JSON, `soak-<delivery>-<seed>.*`) goes to DIR
# (default target/soak). The same seed replays the same faults in the same
# order with the same holds. It starts the test services if they are not
# running, and leaves them as it found them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

minutes=30 seed=1 delivery=idempotent kafka=single report=$PWD/target/soak
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --delivery) delivery=$2; shift 2 ;;
    --kafka) kafka=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    *) echo "usage: $0 --minutes N --seed S [--delivery idempotent|transactional] [--kafka single|cluster] [--report DIR]" >&2; exit 2 ;;
  esac
done
case "$delivery" in idempotent | transactional) ;; *) echo "--delivery is idempotent or transactional" >&2; exit 2 ;; esac
case "$kafka" in single | cluster) ;; *) echo "--kafka is single or cluster" >&2; exit 2 ;; esac
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "--seed is a number" >&2; exit 2; }
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "--minutes is a number" >&2; exit 2; }

started=0
case "$(scripts/services.sh status)" in
  *"postgresql: running"*"kafka: running"*"toxiproxy: running"*) ;;
  *) started=1; scripts/services.sh start; scripts/services.sh start-proxies ;;
esac
cluster_started=0
# The status in full before grep reads it: with pipefail, grep -q's early
# exit would make a running cluster look stopped.
if [ "$kafka" = cluster ] && [[ "$(scripts/services.sh status)" != *"cluster broker 1: running"* ]]; then
  cluster_started=1
  scripts/services.sh start-cluster
fi
cleanup() {
  if [ "$started" = 1 ]; then
    scripts/services.sh stop || true
  elif [ "$cluster_started" = 1 ]; then
    scripts/services.sh stop-cluster || true
  fi
}
trap cleanup EXIT
eval "$(scripts/services.sh env)"
mkdir -p "$report"
OUTBOX_SOAK_MINUTES=$minutes OUTBOX_SOAK_SEED=$seed OUTBOX_SOAK_DELIVERY=$delivery OUTBOX_SOAK_KAFKA=$kafka \
OUTBOX_SOAK_REPORT_DIR=$(cd "$report" && pwd) \
  cargo test --test network -- --ignored --exact soak::soak_from_the_environment --nocapture
