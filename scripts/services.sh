#!/usr/bin/env bash
# The local test services: `cargo xtask services COMMAND` (xtask/src/services.rs
# lists the commands; `scripts/services.sh help` prints them). PostgreSQL 15
# (or OUTBOX_TEST_PG_MAJOR), a Kafka broker and Kafka Connect with Debezium
# on loopback; `start` builds no Go tool, `start-proxies` builds Toxiproxy and
# `tools NAME...` the others. Tests run this file (OUTBOX_TEST_SERVICES).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/xtask.sh" services "$@"
