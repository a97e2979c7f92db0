module outbox-cdc/k8s-check

go 1.24

require (
	github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring v0.95.2
	k8s.io/api v0.36.2
	sigs.k8s.io/yaml v1.6.0
)
