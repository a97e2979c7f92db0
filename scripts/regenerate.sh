#!/usr/bin/env bash
# Regenerates the committed Debezium configuration (every deployment target)
# and its snapshots from the outbox definition and outbox-cdc.example.toml,
# the alerting rules and the metrics reference from the metric definitions,
# the error-code reference from the codes, the preflight rule table from
# the rule list and the configuration reference
# from the configuration's definitions, and the charts of the committed
# benchmark and soak results (docs/*.svg).
# Review the diff afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for pair in connect:outbox-cdc.properties connect-json:outbox-cdc.json \
  debezium-server:outbox-cdc.debezium-server.properties \
  strimzi:outbox-cdc.kafkaconnector.yaml strimzi-connect:outbox-cdc.kafkaconnect.yaml; do
  cargo run --quiet -- connector-config --config outbox-cdc.example.toml \
    --target "${pair%%:*}" --out "connector-config/${pair#*:}"
done
cargo run --quiet -- alert-rules >monitoring/outbox-cdc.rules.yml
cp monitoring/outbox-cdc.rules.yml deploy/helm/outbox-cdc/files/outbox-cdc.rules.yml
INSTA_UPDATE=always cargo test --quiet --test it connector_config::snapshots_pin_the_generated_configuration
OUTBOX_CDC_REGENERATE=1 cargo test --quiet --test it -- docs::the_metrics_reference_is_up_to_date docs::the_error_code_reference_is_up_to_date docs::the_preflight_rule_table_is_up_to_date docs::the_configuration_reference_is_up_to_date_and_the_example_agrees_with_it docs::the_charts_are_drawn_from_the_committed_results
git status --short connector-config snapshots monitoring deploy docs/reference 'docs/*.svg'
