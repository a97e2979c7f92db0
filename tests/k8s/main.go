// Reads the objects `helm template` renders (YAML documents on standard
// input) and decodes each, strictly, into its upstream Go type: the
// Kubernetes API's (k8s.io/api) or the Prometheus operator's. An unknown
// field, a wrong type or an unknown kind fails, as the API server would
// refuse it. Run by scripts/chart-check.sh.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func target(h header) (any, error) {
	switch h.APIVersion + "/" + h.Kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1/PodMonitor":
		return &monitoringv1.PodMonitor{}, nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("unknown kind %s %s", h.APIVersion, h.Kind)
}

func main() {
	input, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	failed, count := 0, 0
	kinds := map[string]int{}
	for _, doc := range strings.Split(string(input), "\n---") {
		if strings.TrimSpace(strings.ReplaceAll(doc, "---", "")) == "" {
			continue
		}
		raw, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			fmt.Fprintf(os.Stderr, "not YAML: %v\n", err)
			failed++
			continue
		}
		if string(raw) == "null" {
			continue
		}
		var h header
		if err := json.Unmarshal(raw, &h); err != nil {
			fmt.Fprintf(os.Stderr, "no kind: %v\n", err)
			failed++
			continue
		}
		obj, err := target(h)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed++
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", h.Kind, err)
			failed++
			continue
		}
		count++
		kinds[h.Kind]++
	}
	for k, n := range kinds {
		fmt.Printf("%s %d\n", k, n)
	}
	if failed > 0 || count == 0 {
		fmt.Fprintf(os.Stderr, "%d objects refused, %d decoded\n", failed, count)
		os.Exit(1)
	}
}
