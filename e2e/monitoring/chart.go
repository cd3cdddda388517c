package monitoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
)

// Release and Namespace are the release README.md installs. The rendered
// rules and the scrape configuration name its job and namespace, so the
// alert tests and the dashboard test see the series a real installation
// produces.
const (
	Release   = "karmada-exec-gateway"
	Namespace = "karmada-system"
)

// DashboardKey is the dashboard's key in its ConfigMap, the file name the
// Grafana sidecar writes.
const DashboardKey = "karmada-exec-gateway.json"

// Chart is the monitoring part of a rendered release.
type Chart struct {
	// RuleGroups is the PrometheusRule's spec.groups as rendered, which is
	// what a Prometheus rules file holds.
	RuleGroups []any
	// Alerts are the alerting rules of RuleGroups, in order.
	Alerts []Alert
	// ServiceMonitor is the one ServiceMonitor of the release.
	ServiceMonitor ServiceMonitor
	// MetricsService is the name of the one Service the ServiceMonitor
	// selects: Prometheus Operator's job label.
	MetricsService string
	// Dashboard is the Grafana dashboard of the dashboard ConfigMap.
	Dashboard Dashboard
}

// Alert is an alerting rule, as far as the tests read it.
type Alert struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ServiceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor
// the chart uses.
type ServiceMonitor struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []Endpoint `json:"endpoints"`
	} `json:"spec"`
}

// Endpoint is one ServiceMonitor endpoint.
type Endpoint struct {
	Port              string           `json:"port"`
	Path              string           `json:"path"`
	Scheme            string           `json:"scheme"`
	Interval          string           `json:"interval"`
	ScrapeTimeout     string           `json:"scrapeTimeout"`
	HonorLabels       bool             `json:"honorLabels"`
	Relabelings       []map[string]any `json:"relabelings"`
	MetricRelabelings []map[string]any `json:"metricRelabelings"`
}

// RenderChart renders charts/gateway as Release in Namespace with the
// ServiceMonitor, PrometheusRule and dashboard enabled, plus args (further
// helm flags such as --set), and returns their contents.
func RenderChart(t testing.TB, args ...string) *Chart {
	t.Helper()
	root, err := env.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helmArgs := append([]string{"template", Release, filepath.Join(root, "charts", "gateway"),
		"--namespace", Namespace, "--kube-version", helmtest.KubeVersion,
		"--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true"},
		args...)
	out, stderr, err := helmtest.Run(t, helmArgs...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	c, err := parseChart([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	raw []byte
}

func parseChart(rendered []byte) (*Chart, error) {
	var objs []object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decode rendered chart: %w", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		o := object{raw: raw}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("decode rendered object: %w", err)
		}
		objs = append(objs, o)
	}
	one := func(kind string) (object, error) {
		var found []object
		for _, o := range objs {
			if o.Kind == kind {
				found = append(found, o)
			}
		}
		if len(found) != 1 {
			return object{}, fmt.Errorf("rendered %d %s objects, want 1", len(found), kind)
		}
		return found[0], nil
	}

	c := &Chart{}
	rule, err := one("PrometheusRule")
	if err != nil {
		return nil, err
	}
	var pr struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	var typed struct {
		Spec struct {
			Groups []struct {
				Rules []Alert `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(rule.raw, &pr); err != nil {
		return nil, fmt.Errorf("PrometheusRule: %w", err)
	}
	if err := json.Unmarshal(rule.raw, &typed); err != nil {
		return nil, fmt.Errorf("PrometheusRule: %w", err)
	}
	c.RuleGroups = pr.Spec.Groups
	for _, g := range typed.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				c.Alerts = append(c.Alerts, r)
			}
		}
	}

	sm, err := one("ServiceMonitor")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(sm.raw, &c.ServiceMonitor); err != nil {
		return nil, fmt.Errorf("ServiceMonitor: %w", err)
	}
	selector := labels.SelectorFromSet(c.ServiceMonitor.Spec.Selector.MatchLabels)
	var services []string
	for _, o := range objs {
		if o.Kind == "Service" && selector.Matches(labels.Set(o.Metadata.Labels)) {
			services = append(services, o.Metadata.Name)
		}
	}
	if len(services) != 1 {
		return nil, fmt.Errorf("the ServiceMonitor selects the Services %q, want exactly one", services)
	}
	c.MetricsService = services[0]

	var dashboard *object
	for i, o := range objs {
		if o.Kind != "ConfigMap" {
			continue
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(o.raw, &cm); err != nil {
			return nil, fmt.Errorf("ConfigMap %s: %w", o.Metadata.Name, err)
		}
		if s, ok := cm.Data[DashboardKey]; ok {
			if dashboard != nil {
				return nil, fmt.Errorf("two ConfigMaps hold %s", DashboardKey)
			}
			dashboard = &objs[i]
			if c.Dashboard, err = ParseDashboard([]byte(s)); err != nil {
				return nil, err
			}
		}
	}
	if dashboard == nil {
		return nil, fmt.Errorf("no ConfigMap holds %s", DashboardKey)
	}
	return c, nil
}

// RulesFile is the PrometheusRule's groups as a Prometheus rules file.
func (c *Chart) RulesFile() ([]byte, error) {
	return yaml.Marshal(map[string]any{"groups": c.RuleGroups})
}

// AlertNames lists the alerts in rule order.
func (c *Chart) AlertNames() []string {
	names := make([]string, 0, len(c.Alerts))
	for _, a := range c.Alerts {
		if !slices.Contains(names, a.Alert) {
			names = append(names, a.Alert)
		}
	}
	return names
}
