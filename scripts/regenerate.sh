#!/usr/bin/env bash
# Regenerates the committed Debezium configuration and its snapshots from the
# outbox definition and outbox-cdc.example.toml. Review the diff afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --quiet -- connector-config --config outbox-cdc.example.toml --format properties --out connector-config/outbox-cdc.properties
cargo run --quiet -- connector-config --config outbox-cdc.example.toml --format json --out connector-config/outbox-cdc.json
INSTA_UPDATE=always cargo test --quiet --test connector_config snapshots_pin_the_generated_configuration
git status --short connector-config snapshots
