package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestGrafanaExpand(t *testing.T) {
	vars := []Variable{
		{Name: "namespace"},
		{Name: "job", Multi: true, IncludeAll: true, AllValue: ".*"},
	}
	g := Grafana{Variables: vars, ScrapeInterval: 15 * time.Second, Interval: 30 * time.Second, Range: time.Hour}
	for _, tc := range []struct {
		name    string
		values  map[string][]string
		expr    string
		want    string
		wantErr string
	}{
		{"single value as it is", map[string][]string{"namespace": {"karmada-system"}},
			`up{namespace="$namespace"}`, `up{namespace="karmada-system"}`, ""},
		{"braces and brackets forms", map[string][]string{"namespace": {"a"}},
			`x{a="${namespace}", b="[[namespace]]"}`, `x{a="a", b="a"}`, ""},
		{"multi value regex-escaped", map[string][]string{"job": {"gw.metrics"}},
			`up{job=~"$job"}`, `up{job=~"gw\\.metrics"}`, ""},
		{"several values joined", map[string][]string{"job": {"a", "b-metrics"}},
			`up{job=~"$job"}`, `up{job=~"(a|b-metrics)"}`, ""},
		{"All is the allValue unescaped", map[string][]string{"job": {".*"}},
			`up{job=~"$job"}`, `up{job=~".*"}`, ""},
		{"interval variables", nil,
			`rate(x[$__rate_interval]) + rate(x[$__interval]) + increase(x[$__range])`,
			`rate(x[1m]) + rate(x[30s]) + increase(x[1h])`, ""},
		{"unknown variable", nil, `up{job="$nope"}`, "", `no value for the variables ["nope"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := g
			g.Values = tc.values
			got, err := g.Expand(tc.expr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Expand(%q) = %q, %v; want error %q", tc.expr, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expand(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
			}
		})
	}
}

func TestLabelValuesQuery(t *testing.T) {
	for q, want := range map[string][2]string{
		`label_values(karmada_gateway_requests_total, namespace)`:                   {"karmada_gateway_requests_total", "namespace"},
		`label_values(karmada_gateway_requests_total{namespace="$namespace"}, job)`: {`karmada_gateway_requests_total{namespace="$namespace"}`, "job"},
		`label_values(job)`: {"", "job"},
	} {
		sel, label, err := LabelValuesQuery(q)
		if err != nil || sel != want[0] || label != want[1] {
			t.Errorf("LabelValuesQuery(%q) = %q, %q, %v; want %q", q, sel, label, err, want)
		}
	}
	if _, _, err := LabelValuesQuery(`query_result(up)`); err == nil {
		t.Error("query_result(...) accepted as label_values")
	}
}

// TestDashboardQueriesParse: every panel query, expanded as Grafana would,
// is a valid PromQL expression by promtool (as the expression of a
// recording rule), and every template variable is a label_values query.
func TestDashboardQueriesParse(t *testing.T) {
	c := RenderChart(t)
	d := c.Dashboard
	g := Grafana{Variables: d.Templating.List, ScrapeInterval: 30 * time.Second, Interval: time.Minute, Range: 6 * time.Hour,
		Values: map[string][]string{}}
	vars, err := d.VariableQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		g.Values[v.Name] = []string{Namespace}
	}
	queries, err := g.ExpandQueries(d)
	if err != nil {
		t.Fatal(err)
	}
	var rules []any
	for i, q := range queries {
		rules = append(rules, map[string]any{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": q.Expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	Promtool(t, dir, "check", "rules", "dashboard.rules.yaml")
}

// TestScrapeConfig: the scrape configuration standing for the ServiceMonitor
// is one promtool accepts, keeps the ServiceMonitor's path and scheme, and
// sets the job and namespace the rules and the dashboard select.
func TestScrapeConfig(t *testing.T) {
	c := RenderChart(t)
	if c.MetricsService != Release+"-metrics" {
		t.Errorf("the ServiceMonitor selects Service %q, want %s-metrics", c.MetricsService, Release)
	}
	b, err := c.PrometheusConfig(ScrapeOptions{Target: "127.0.0.1:8080", Pod: "gateway-0", Interval: time.Second, RuleFiles: []string{"rules.yaml"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := writeRules(t, c)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// check config also checks the rule files it names.
	if out := Promtool(t, dir, "check", "config", "prometheus.yml"); !strings.Contains(out, "SUCCESS: 1 rule files found") {
		t.Errorf("promtool check config did not check the rules file:\n%s", out)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName        string `json:"job_name"`
			MetricsPath    string `json:"metrics_path"`
			Scheme         string `json:"scheme"`
			ScrapeInterval string `json:"scrape_interval"`
			StaticConfigs  []struct {
				Labels map[string]string `json:"labels"`
			} `json:"static_configs"`
			RelabelConfigs []map[string]any `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("scrape_configs = %+v, want one job for the one endpoint", cfg.ScrapeConfigs)
	}
	sc := cfg.ScrapeConfigs[0]
	ep := c.ServiceMonitor.Spec.Endpoints[0]
	if sc.JobName != "serviceMonitor/"+Namespace+"/"+Release+"/0" || sc.MetricsPath != ep.Path || sc.Scheme != ep.Scheme || sc.ScrapeInterval != "1s" {
		t.Errorf("scrape job %+v does not follow the ServiceMonitor endpoint %+v", sc, ep)
	}
	if ns := sc.StaticConfigs[0].Labels["namespace"]; ns != Namespace {
		t.Errorf("namespace label %q, want %s", ns, Namespace)
	}
	if r := sc.RelabelConfigs[0]; r["target_label"] != "job" || r["replacement"] != c.MetricsService {
		t.Errorf("first relabeling %v does not set job to the Service's name", r)
	}
}
