#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine (CI runs
# exactly this): `cargo xtask test` (xtask/src/test/), after the build
# prerequisites of rdkafka's bundled librdkafka. It prints a table of the
# steps' start times and durations, then `tests: N passed, N failed`.
#
# OUTBOX_TEST_PG_MAJORS="14 16 17 18" picks the matrix's majors (all of them
# unless set; an empty value runs PostgreSQL 15 only, for quick local runs).
# `scripts/test.sh --plan` prints the steps and runs nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/build-prerequisites.sh
exec scripts/xtask.sh test "$@"
