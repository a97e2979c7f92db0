#!/usr/bin/env bash
# Runs the development tools (xtask/, `cargo xtask`): built in a target
# directory of its own, target/xtask, so it never waits on the lock of a
# build of the relay (the tests call it while cargo builds), and without
# clippy's driver, which the test suite sets for the relay's build. The
# suite's own children run the suite's binary directly (OUTBOX_XTASK_BIN).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export OUTBOX_XTASK_REPO=$repo
if [ -n "${OUTBOX_XTASK_BIN:-}" ] && [ -x "$OUTBOX_XTASK_BIN" ]; then
  exec "$OUTBOX_XTASK_BIN" "$@"
fi
exec env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
  cargo run --quiet --manifest-path "$repo/xtask/Cargo.toml" --target-dir "$repo/target/xtask" -- "$@"
