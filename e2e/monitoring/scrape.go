package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
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
	// TargetsFile, if set, replaces Target and Pod: the targets are read
	// from this file (file_sd_configs, written by WriteTargets), which
	// Prometheus watches, so a test follows pods that come and go as
	// Kubernetes discovery would.
	TargetsFile string
}

// ScrapeTarget is one gateway pod's metrics listener.
type ScrapeTarget struct {
	// Addr is host:port, Pod the pod's name.
	Addr, Pod string
}

// targetLabels are the labels Prometheus Operator's relabelings give a
// target of the ServiceMonitor's endpoint.
func (c *Chart) targetLabels(namespace, endpoint, pod string) map[string]string {
	return map[string]string{
		"namespace": namespace, "service": c.MetricsService, "endpoint": endpoint,
		"pod": pod, "container": "gateway",
	}
}

// scrapeNamespace is the namespace the ServiceMonitor's targets are in.
func (c *Chart) scrapeNamespace() (string, error) {
	sm := c.ServiceMonitor
	namespace := sm.Metadata.Namespace
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) > 0 {
		if len(ns) != 1 {
			return "", fmt.Errorf("ServiceMonitor %s selects namespaces %q; one static target stands for one", sm.Metadata.Name, ns)
		}
		namespace = ns[0]
	}
	return namespace, nil
}

// WriteTargets writes targets as the file_sd file of ScrapeOptions.TargetsFile
// (through a rename, so Prometheus never reads half a file), labeled as
// the ServiceMonitor's one endpoint labels its targets.
func (c *Chart) WriteTargets(path string, targets []ScrapeTarget) error {
	eps := c.ServiceMonitor.Spec.Endpoints
	if len(eps) != 1 {
		return fmt.Errorf("ServiceMonitor %s has %d endpoints; a targets file stands for one", c.ServiceMonitor.Metadata.Name, len(eps))
	}
	namespace, err := c.scrapeNamespace()
	if err != nil {
		return err
	}
	groups := make([]any, 0, len(targets))
	for _, t := range targets {
		groups = append(groups, map[string]any{"targets": []string{t.Addr}, "labels": c.targetLabels(namespace, eps[0].Port, t.Pod)})
	}
	b, err := json.Marshal(groups)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".new", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".new", path)
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
	namespace, err := c.scrapeNamespace()
	if err != nil {
		return nil, err
	}
	if o.TargetsFile != "" && len(sm.Spec.Endpoints) != 1 {
		return nil, fmt.Errorf("ServiceMonitor %s has %d endpoints; a targets file stands for one", sm.Metadata.Name, len(sm.Spec.Endpoints))
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
			"relabel_configs": relabel,
		}
		if o.TargetsFile != "" {
			job["file_sd_configs"] = []any{map[string]any{"files": []string{o.TargetsFile}, "refresh_interval": interval}}
		} else {
			job["static_configs"] = []any{map[string]any{"targets": []string{o.Target}, "labels": c.targetLabels(namespace, ep.Port, o.Pod)}}
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
