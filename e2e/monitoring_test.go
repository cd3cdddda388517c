package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/monitoring"
)

// scrapeInterval is the ServiceMonitor's interval scaled down for the test:
// Prometheus scrapes the gateway, and evaluates the chart's rules, every
// second.
const scrapeInterval = time.Second

// TestMonitoringOnRealPrometheus runs Debian's prometheus with a scrape job
// equivalent to the chart's rendered ServiceMonitor (its path and scheme,
// the job and namespace labels Prometheus Operator gives the target) and
// the chart's PrometheusRule, pointed at the e2e gateway. It drives
// traffic that moves every metric the dashboard shows — in authorize mode
// exec allowed and denied, logs and logs -f, watches up to the stream
// limit and one over it, a refused method, exec into a pod no policy
// places (503), a client CA bundle replaced by garbage and then restored;
// in passthrough mode exec and an events list whose member part the caller
// may not read — then evaluates every dashboard query through Prometheus'
// HTTP API as Grafana would send it. Stream cuts need a node to die: their
// series are exported at 0 and only read here (TestNodeFaults moves them). An invalid query, or one without a
// single value over the test's range, fails naming its panel. The rules
// must evaluate without error and the certificate reload alert must fire
// for the garbage bundle.
func TestMonitoringOnRealPrometheus(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	chart := monitoring.RenderChart(t)
	dir := t.TempDir()

	// The gateway in authorize mode, with a client CA bundle this test may
	// replace, read every 200ms, and two streams per client at most.
	caFile := filepath.Join(dir, "client-ca.crt")
	writeFile(t, caFile, testEnv.CAPEM())
	restartGatewayFor(t, []string{"--auth-mode=authorize", "--client-ca-file=" + caFile,
		"--certificate-reload-interval=200ms", "--max-streams-per-client=2"}, "--auth-mode=passthrough")

	rules, err := chart.RulesFile()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "rules.yaml"), rules)
	metricsURL, err := url.Parse(testEnv.GatewayMetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	config, err := chart.PrometheusConfig(monitoring.ScrapeOptions{Target: metricsURL.Host, Pod: "gateway",
		Interval: scrapeInterval, RuleFiles: []string{filepath.Join(dir, "rules.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	prom, err := monitoring.StartPrometheus(ctx, monitoring.Binary(t, "prometheus"), dir, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(prom.LogTail())
		}
	})
	start := time.Now()
	// Every counter needs a sample before the traffic: one that is first
	// scraped already raised shows Prometheus no increase.
	if err := prom.WaitScrapedAfter(ctx, chart.MetricsService, start, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("prometheus at %s scrapes the gateway at %s as job %s (first scrapes after %s)",
		prom.URL, metricsURL.Host, chart.MetricsService, time.Since(start).Round(100*time.Millisecond))

	const pod, member = "monitoring-pod", "member1"
	placePod(t, env.ShellPod(env.Namespace, pod, `i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done`), []string{member}, member)
	driveAuthorizeMode(t, pod, caFile)
	if err := prom.WaitScrapedAfter(ctx, chart.MetricsService, time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := testEnv.RestartGateway(ctx, "--auth-mode=passthrough"); err != nil {
		t.Fatal(err)
	}
	drivePassthroughMode(t, pod)
	if err := prom.WaitScrapedAfter(ctx, chart.MetricsService, time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}

	// Direct member access, recording every session into a spool whose
	// store refuses connections: the recording panels' series move, the
	// uploads failing and the recordings waiting.
	if err := testEnv.RestartGateway(ctx, append([]string{"--auth-mode=passthrough", "--member-access=direct"}, unreachableBucket(t)...)...); err != nil {
		t.Fatal(err)
	}
	driveDirectAccess(t, prom, chart, pod, member)

	assertRulesEvaluate(t, prom, chart)
	assertPanelsHaveData(t, prom, chart, start, true)
}

// driveDirectAccess moves the metrics of --member-access=direct: an exec
// builds member's pools (its series start at 0) and dials it, a scrape
// sees them, then a changed CA in member's Secret (the same certificate,
// one newline more) closes its connections and counts a rebuild.
func driveDirectAccess(t *testing.T, prom *monitoring.Prometheus, chart *monitoring.Chart, pod, member string) {
	ctx := t.Context()
	kubectlExec(t, testEnv.GatewayKubeconfig(env.UserExecOnly), pod)
	if err := prom.WaitScrapedAfter(ctx, chart.MetricsService, time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	secrets := karmadaClient(t).CoreV1().Secrets(env.KarmadaCluster)
	s, err := secrets.Get(ctx, member, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := s.Data["caBundle"]
	s.Data["caBundle"] = append(slices.Clone(ca), '\n')
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if s, err := secrets.Get(ctx, member, metav1.GetOptions{}); err == nil {
			s.Data["caBundle"] = ca
			_, _ = secrets.Update(ctx, s, metav1.UpdateOptions{})
		}
	})
	// The gateway applies it from its informer: the next exec runs on
	// pools built on the new CA.
	kubectlExec(t, testEnv.GatewayKubeconfig(env.UserExecOnly), pod)
	if err := prom.WaitScrapedAfter(ctx, chart.MetricsService, time.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

func karmadaClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// driveAuthorizeMode moves the metrics of authorize mode: decisions
// allowed and denied (some from the cache), exec, logs, logs -f, watches
// up to the per-client limit and one refused over it, a method the path
// guards refuse, exec into a pod no policy places, and a failed then a
// successful reload of the client CA bundle.
func driveAuthorizeMode(t *testing.T, pod, caFile string) {
	ctx := t.Context()
	admin := testEnv.GatewayKubeconfig(env.UserAdmin)
	for range 2 { // the second is answered from the decision cache
		kubectlExec(t, testEnv.GatewayKubeconfig(env.UserExecOnly), pod)
	}
	kubectlExec(t, testEnv.GatewayKubeconfig(env.UserExecKarmadaOnly), pod)
	if _, _, err := testEnv.RunKubectl(ctx, testEnv.GatewayKubeconfig(env.UserNoExec), nil, execArgs(pod)...); err == nil {
		t.Errorf("authorize mode: %s could exec", env.UserNoExec)
	}
	if out, _, err := testEnv.RunKubectl(ctx, admin, nil, "logs", pod, "--tail=1"); err != nil || !strings.Contains(out, "tick-") {
		t.Errorf("kubectl logs --tail=1: %q, %v", out, err)
	}
	follow := startKubectl(t, admin, nil, "logs", "-f", pod)
	if err := follow.waitOutput(ctx, "tick-", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	follow.kill()

	watchOverLimit(t, env.UserExecOnly)

	if st := rawStatus(t, http.MethodPut, testEnv.GatewayURL()+"/api/v1/namespaces/"+env.Namespace+"/pods/"+pod+"/exec", testEnv.Token(env.UserAdmin)); st.Code != http.StatusMethodNotAllowed {
		t.Errorf("PUT pods/exec: %+v, want 405", st)
	}
	execUnplacedPod(t)

	// A bundle that does not load keeps the previous one in use and counts
	// an error; the good one again counts a success. Renamed into place, as
	// a Secret volume swaps files, so no read sees half a file.
	replaceFile(t, caFile, []byte("not a PEM bundle\n"))
	waitGatewayCounter(t, `karmada_gateway_certificate_reloads_total{name="client-ca",result="error"}`)
	replaceFile(t, caFile, testEnv.CAPEM())
	waitGatewayCounter(t, `karmada_gateway_certificate_reloads_total{name="client-ca",result="success"}`)
}

func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	writeFile(t, path+".new", b)
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// drivePassthroughMode: exec as the caller, and a pod's events listed by a
// caller who may read karmada-apiserver's events but not the member's, so
// the member's part is unavailable.
func drivePassthroughMode(t *testing.T, pod string) {
	kubectlExec(t, testEnv.GatewayKubeconfig(env.UserExecOnly), pod)
	client, warnings := gatewayClientWithWarnings(t, env.UserExecKarmadaOnly)
	if _, err := client.CoreV1().Events(env.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod}); err != nil {
		t.Fatalf("list events as %s: %v", env.UserExecKarmadaOnly, err)
	}
	if !strings.Contains(warnings.String(), "unavailable") {
		t.Fatalf("events list as %s: no Warning that the member's events are unavailable (%q)", env.UserExecKarmadaOnly, warnings.String())
	}
}

// watchOverLimit opens as many pod watches as user may hold
// (--max-streams-per-client=2), then one more, which must get 429.
func watchOverLimit(t *testing.T, user string) {
	cfg, err := testEnv.GatewayConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	watchesThenRefused(t, client, testEnv.GatewayURL(), 2)
}

// watchesThenRefused opens n pod watches through the gateway at base with
// client (one client identity), then one more, which must get 429. The
// watches are closed before it returns: an open one would hold the
// gateway's next shutdown for its whole drain period.
func watchesThenRefused(t *testing.T, client *http.Client, base string, n int) {
	t.Helper()
	var open []io.Closer
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	watch := func() *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/v1/namespaces/"+env.Namespace+"/pods?watch=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp.Body)
		return resp
	}
	for i := range n {
		if resp := watch(); resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			t.Fatalf("watch %d of %d: %d %s", i+1, n, resp.StatusCode, body)
		}
	}
	if resp := watch(); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("watch %d answered %d, want 429", n+1, resp.StatusCode)
	}
}

// execUnplacedPod creates a pod in a namespace no policy covers and waits
// until exec into it gets the gateway's 503 (404 until its cache has the
// pod).
func execUnplacedPod(t *testing.T) {
	const ns, name = "e2e-monitoring-unplaced", "unplaced"
	ctx := t.Context()
	admin, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, env.ShellPod(ns, name, "true"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := testEnv.DeletePod(ctx, ns, name); err != nil {
			t.Errorf("delete pod: %v", err)
		}
	})
	var st metav1.Status
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st = rawExecStatus(t, env.UserAdmin, ns, name)
		return st.Code != http.StatusNotFound, nil
	})
	if err != nil || st.Code != http.StatusServiceUnavailable {
		t.Fatalf("exec into a pod without a policy: %+v (%v), want 503", st, err)
	}
}

// waitGatewayCounter polls the gateway's /metrics until series is above 0.
func waitGatewayCounter(t *testing.T, series string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, testEnv.GatewayMetricsURL()+"/metrics", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if value, ok := strings.CutPrefix(line, series+" "); ok {
				last = line
				return value != "0", nil
			}
		}
		last = series + " not exported"
		return false, nil
	})
	if err != nil {
		t.Fatalf("the gateway's /metrics never had %s above 0 (last: %s): %v", series, last, err)
	}
}

// assertRulesEvaluate: Prometheus evaluates every rule of the chart
// without error, and the alert on failed certificate reloads (no `for`)
// fires for the client CA bundle that did not load.
func assertRulesEvaluate(t *testing.T, prom *monitoring.Prometheus, chart *monitoring.Chart) {
	t.Helper()
	ctx := t.Context()
	res, err := prom.API.Rules(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, g := range res.Groups {
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok {
				loaded = append(loaded, a.Name)
				if a.Health == promv1.RuleHealthBad {
					t.Errorf("alert %s does not evaluate: %s", a.Name, a.LastError)
				}
			}
		}
	}
	if want := chart.AlertNames(); !slices.Equal(loaded, want) {
		t.Errorf("prometheus loaded the alerts %q, want the chart's %q", loaded, want)
	}

	const alert = "KarmadaGatewayCertificateReloadFailed"
	var active []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := prom.API.Alerts(ctx)
		if err != nil {
			return false, nil
		}
		active = active[:0]
		for _, a := range res.Alerts {
			active = append(active, fmt.Sprintf("%s%v(%s)", a.Labels["alertname"], a.Labels, a.State))
			if a.Labels["alertname"] == alert && a.Labels["name"] == "client-ca" && a.State == promv1.AlertStateFiring {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("%s{name=client-ca} never fired; active alerts: %q; the series it reads:\n%s",
			alert, active, describeSeries(t, prom, "karmada_gateway_certificate_reloads_total", time.Now().Add(-10*time.Minute), time.Now()))
	}
}

// assertPanelsHaveData evaluates the dashboard's variables and then every
// panel query as Grafana sends them, over the time the test ran, with a
// step of the scrape interval:
//   - each query variable (label_values(selector, label)) through the
//     label values API, with the variables before it substituted; the test
//     selects the release's namespace and job, which must be among the
//     values Grafana would offer;
//   - $__interval is the step, $__rate_interval Grafana's max($__interval
//   - scrape interval, 4 * scrape interval), $__range the whole range.
//
// A query Prometheus refuses, or one with no value that is a number over
// the whole range, fails naming its panel. Without directScraped (no
// gateway scraped ran with --member-access=direct) the direct member
// access panels, whose series only such a gateway has, are left out.
func assertPanelsHaveData(t *testing.T, prom *monitoring.Prometheus, chart *monitoring.Chart, start time.Time, directScraped bool) {
	t.Helper()
	ctx := t.Context()
	// The last step is now, so it sees the scrapes that were just waited
	// for; steps are aligned on it.
	end := time.Now()
	start = end.Add(-(end.Sub(start)/scrapeInterval + 1) * scrapeInterval)
	d := chart.Dashboard
	g := monitoring.Grafana{Variables: d.Templating.List, Values: map[string][]string{},
		ScrapeInterval: scrapeInterval, Interval: scrapeInterval, Range: end.Sub(start)}
	choose := map[string]string{"namespace": monitoring.Namespace, "job": chart.MetricsService}
	vars, err := d.VariableQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		selector, err := g.Expand(v.Selector)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		var matches []string
		if selector != "" {
			matches = []string{selector}
		}
		values, _, _, err := prom.API.LabelValues(ctx, v.Label, matches, start, end)
		if err != nil {
			t.Fatalf("variable %s: label values of %s for %q: %v", v.Name, v.Label, selector, err)
		}
		want, ok := choose[v.Name]
		if !ok {
			t.Fatalf("variable %s: the test does not know which value to choose", v.Name)
		}
		if !slices.Contains(values, model.LabelValue(want)) {
			t.Fatalf("variable %s offers %q, not %q", v.Name, values, want)
		}
		g.Values[v.Name] = []string{want}
	}

	queries, err := g.ExpandQueries(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		expr := q.Expr
		if !directScraped && directOnly.MatchString(expr) {
			t.Logf("%s: direct member access only, no gateway in that mode scraped", q.Name)
			continue
		}
		v, _, _, err := prom.API.QueryRange(ctx, expr, promv1.Range{Start: start, End: end, Step: scrapeInterval})
		if err != nil {
			t.Errorf("%s: %s: %v", q.Name, expr, err)
			continue
		}
		m, ok := v.(model.Matrix)
		if !ok {
			t.Errorf("%s: %s returned %s, want a matrix", q.Name, expr, v.Type())
			continue
		}
		if !hasNumber(m) {
			t.Errorf("%s has no data: %s returned %d series without a number; the series it reads:\n%s",
				q.Name, expr, len(m), describeSeries(t, prom, expr, start, end))
		}
	}
}

func hasNumber(m model.Matrix) bool {
	for _, s := range m {
		for _, p := range s.Values {
			if !math.IsNaN(float64(p.Value)) {
				return true
			}
		}
	}
	return false
}

var seriesName = regexp.MustCompile(`\bkarmada_gateway_[a-z_]+`)

// unreachableBucket are the flags of a gateway that records every session
// and uploads to a store nothing listens for: a port this test held and
// closed.
func unreachableBucket(t *testing.T) []string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	spool, creds := filepath.Join(dir, "spool"), filepath.Join(dir, "credentials")
	if err := os.Mkdir(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, creds, []byte("unused\n"))
	return []string{"--record-sessions=all", "--record-sessions-dir=" + spool, "--record-sessions-s3-bucket=recordings",
		"--record-sessions-s3-endpoint=" + endpoint, "--record-sessions-s3-path-style",
		"--record-sessions-s3-access-key-id-file=" + creds, "--record-sessions-s3-secret-access-key-file=" + creds}
}

// directOnly matches the series only a gateway with --member-access=direct
// exports.
var directOnly = regexp.MustCompile(`\bkarmada_gateway_member_(connections|dials_total|transport_rebuilds_total)\b`)

// describeSeries lists, for a failure message, every raw series of the
// metrics expr reads, with its samples over [start, end].
func describeSeries(t *testing.T, prom *monitoring.Prometheus, expr string, start, end time.Time) string {
	var b strings.Builder
	for _, name := range slices.Compact(slices.Sorted(slices.Values(seriesName.FindAllString(expr, -1)))) {
		v, _, _, err := prom.API.QueryRange(t.Context(), name, promv1.Range{Start: start, End: end, Step: scrapeInterval})
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", name, err)
			continue
		}
		m, _ := v.(model.Matrix)
		if len(m) == 0 {
			fmt.Fprintf(&b, "  %s: no series\n", name)
		}
		for _, s := range m {
			values := make([]string, 0, len(s.Values))
			for _, p := range s.Values {
				values = append(values, p.Value.String())
			}
			fmt.Fprintf(&b, "  %s: %s\n", s.Metric, strings.Join(slices.Compact(values), " "))
		}
	}
	return b.String()
}
