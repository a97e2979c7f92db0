#!/usr/bin/env bash
# Checks the Helm chart without a cluster: `helm lint`, then `helm
# template` with the default values and with a secured cluster's
# (tests/k8s/secured-values.yaml, with the PodMonitor, the rules and the
# Grafana dashboard on), each rendered object decoded strictly
# into its upstream Go type (tests/k8s: k8s.io/api and the Prometheus
# operator's types; an unknown field fails as the API server would refuse
# it). Helm and the checker are built with `go install`/`go build` into
# .cache/go, pinned. Exit status 0 only when every step passes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO_CACHE=${OUTBOX_TEST_GO_CACHE:-$PWD/.cache/go}
chart=deploy/helm/outbox-cdc
log() { printf '[chart] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "Go is needed to build helm (go install)"; exit 1; }
# Helm v3.22.0 (OUTBOX_HELM_VERSION picks another; v3.21.4 when the module
# proxy refuses it), built once by the services tool (xtask/src/tools.rs).
scripts/services.sh tools helm
helm=$GO_CACHE/bin/helm
checker=$GO_CACHE/bin/k8s-check
if [ ! -x "$checker" ] || [ tests/k8s/main.go -nt "$checker" ] || [ tests/k8s/go.mod -nt "$checker" ]; then
  log "building the strict decoder (tests/k8s)"
  (cd tests/k8s && go build -o "$checker" .) >&2
fi

log "$("$helm" version --short)"
"$helm" lint --strict "$chart" >&2
"$helm" lint --strict "$chart" -f tests/k8s/secured-values.yaml >&2
for values in "" tests/k8s/secured-values.yaml; do
  args=(template outbox-cdc "$chart" --namespace outbox)
  [ -n "$values" ] && args+=(-f "$values")
  log "helm ${args[*]} | strict decoding"
  "$helm" "${args[@]}" | "$checker"
done
# The dashboard's ConfigMap: off by default; on, labelled for Grafana's
# sidecar, with the generated dashboard whole.
if "$helm" template outbox-cdc "$chart" | grep -q grafana_dashboard; then
  log "the dashboard ConfigMap renders with the default values"; exit 1
fi
rendered=$("$helm" template outbox-cdc "$chart" -f tests/k8s/secured-values.yaml --show-only templates/dashboard.yaml)
grep -q 'grafana_dashboard: "1"' <<<"$rendered" || { log "the dashboard ConfigMap lacks the sidecar's label"; exit 1; }
grep -q '"uid": "outbox-cdc"' <<<"$rendered" || { log "the dashboard ConfigMap lacks the dashboard"; exit 1; }
log "the chart lints and renders objects the API would take"
