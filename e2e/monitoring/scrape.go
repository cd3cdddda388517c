package monitoring

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// ScrapeOptions say where the ServiceMonitor's target really is.
type ScrapeOptions struct {
	// Target is host:port of the gateway's metrics listener, where the
	// Service's metrics port leads.
	Target string
	// Pod names the pod label, as Prometheus Operator takes it from the
	// endpoint's target.
	Pod string
	// Interval replaces the endpoints' interval and scrape timeout, so a
	// test sees several scrapes within seconds; rules are evaluated as
	// often.
	Interval time.Duration
	// RuleFiles are rules files Prometheus loads (rule_files).
	RuleFiles []string
}

// PrometheusConfig is a Prometheus configuration whose one scrape job per
// ServiceMonitor endpoint is what Prometheus Operator generates for it,
// with the endpoints Kubernetes discovery would find replaced by a static
// target: the same job_name, metrics_path, scheme, honor_labels, the target
// labels the Operator's relabelings set (job is the Service's name;
// namespace, service, pod, container, endpoint), then the endpoint's own
// relabelings and metric relabelings.
func (c *Chart) PrometheusConfig(o ScrapeOptions) ([]byte, error) {
	sm := c.ServiceMonitor
	if len(sm.Spec.Endpoints) == 0 {
		return nil, fmt.Errorf("ServiceMonitor %s has no endpoints", sm.Metadata.Name)
	}
	namespace := sm.Metadata.Namespace
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) > 0 {
		if len(ns) != 1 {
			return nil, fmt.Errorf("ServiceMonitor %s selects namespaces %q; one static target stands for one", sm.Metadata.Name, ns)
		}
		namespace = ns[0]
	}
	interval := duration(o.Interval)
	var jobs []any
	for i, ep := range sm.Spec.Endpoints {
		relabel := []any{
			map[string]any{"target_label": "job", "replacement": c.MetricsService},
		}
		relabel = append(relabel, relabelConfigs(ep.Relabelings)...)
		metricRelabel := relabelConfigs(ep.MetricRelabelings)
		job := map[string]any{
			"job_name":        fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.Metadata.Namespace, sm.Metadata.Name, i),
			"honor_labels":    ep.HonorLabels,
			"metrics_path":    orDefault(ep.Path, "/metrics"),
			"scheme":          orDefault(ep.Scheme, "http"),
			"scrape_interval": interval,
			"scrape_timeout":  interval,
			"static_configs": []any{map[string]any{
				"targets": []string{o.Target},
				"labels": map[string]string{
					"namespace": namespace, "service": c.MetricsService, "endpoint": ep.Port,
					"pod": o.Pod, "container": "gateway",
				},
			}},
			"relabel_configs": relabel,
		}
		if len(metricRelabel) > 0 {
			job["metric_relabel_configs"] = metricRelabel
		}
		jobs = append(jobs, job)
	}
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": interval},
		"scrape_configs": jobs,
	}
	if len(o.RuleFiles) > 0 {
		cfg["rule_files"] = o.RuleFiles
	}
	return yaml.Marshal(cfg)
}

// duration formats d as Prometheus and Grafana write durations ("1m30s").
func duration(d time.Duration) string { return model.Duration(d).String() }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// relabelConfigs turns the Operator's RelabelConfig objects (camelCase keys)
// into Prometheus' relabel_configs (snake_case keys).
func relabelConfigs(in []map[string]any) []any {
	out := make([]any, 0, len(in))
	for _, r := range in {
		c := map[string]any{}
		for k, v := range r {
			c[snake(k)] = v
		}
		out = append(out, c)
	}
	return out
}

func snake(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
