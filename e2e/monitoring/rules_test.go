package monitoring

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

const alertTests = "testdata/alerts.test.yaml"

// writeRules writes the rendered rules and a copy of the alert tests into
// one directory, where the tests' rule_files finds rules.yaml.
func writeRules(t *testing.T, c *Chart) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := c.RulesFile()
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"rules.yaml": rules, "alerts.test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAlertRules runs Debian's promtool on the chart's PrometheusRule:
// `check rules` (syntax, templates, duplicates) and `test rules` with
// testdata/alerts.test.yaml.
func TestAlertRules(t *testing.T) {
	c := RenderChart(t)
	dir := writeRules(t, c)
	out := Promtool(t, dir, "check", "rules", "rules.yaml")
	if want := "SUCCESS: " + strconv.Itoa(len(c.Alerts)) + " rules found"; !strings.Contains(out, want) {
		t.Errorf("promtool check rules printed %q, want %q", out, want)
	}
	Promtool(t, dir, "test", "rules", "alerts.test.yaml")
}

// ruleTests is the part of a promtool test file TestEveryAlertHasCases reads.
type ruleTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertHasCases: each alert the chart renders has a case where it
// fires and one where it stays silent, evaluated after its `for` (so the
// silence is not just the pending period), and no case names an alert the
// chart does not have. A new alert without tests fails here.
func TestEveryAlertHasCases(t *testing.T) {
	c := RenderChart(t)
	b, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	forOf := map[string]time.Duration{}
	for _, a := range c.Alerts {
		d := time.Duration(0)
		if a.For != "" {
			if d, err = promDuration(a.For); err != nil {
				t.Fatalf("%s: for %q: %v", a.Alert, a.For, err)
			}
		}
		forOf[a.Alert] = d
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, at := range tc.AlertRuleTest {
			pending, known := forOf[at.Alertname]
			if !known {
				t.Errorf("test %q checks %s, which the chart does not render", tc.Name, at.Alertname)
				continue
			}
			evalAt, err := promDuration(at.EvalTime)
			if err != nil {
				t.Fatalf("test %q: eval_time %q: %v", tc.Name, at.EvalTime, err)
			}
			switch {
			case len(at.ExpAlerts) > 0:
				fires[at.Alertname] = true
			case evalAt > pending:
				silent[at.Alertname] = true
			}
		}
	}
	if len(c.Alerts) == 0 {
		t.Fatal("the chart renders no alert")
	}
	for _, name := range c.AlertNames() {
		if !fires[name] {
			t.Errorf("%s has no case in %s where it fires", name, alertTests)
		}
		if !silent[name] {
			t.Errorf("%s has no case in %s where it stays silent after its for (%v)", name, alertTests, forOf[name])
		}
	}
}

func promDuration(s string) (time.Duration, error) {
	d, err := model.ParseDuration(s)
	return time.Duration(d), err
}
