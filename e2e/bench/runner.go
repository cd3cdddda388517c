package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// Sizes scales the measurements; Quick and Full are the two presets.
type Sizes struct {
	Rounds        int           // interleaved rounds per path
	RoundDuration time.Duration // closed-loop load per round and path
	Concurrency   []int         // passthrough concurrencies
	ListPods      int           // pods returned by the LIST measurement
	SetupSamples  int           // exec sessions timed for setup, per path
	StreamSamples int           // `exec -- true` sessions per path, protocol and concurrency (stream-setup)
	JobReplays    int           // GitLab-Runner-shaped jobs per path (job-replay)
	ExecBytes     int64         // stdout bytes per exec transfer
	ExecRounds    int           // transfers per path and protocol
	StdinBytes    int64         // stdin bytes per exec transfer
	Sessions      int           // concurrent exec sessions held open
	HoldFor       time.Duration // how long they are held
	LogLines      int           // lines followed with logs -f
	LogBytes      int64         // log bytes read for log throughput
	MemberEvents  int           // member events watched through the merge
	ResolverPods  []int         // pods (with bindings) in the resolver caches
	LabelerRates  []int         // new pods per second
	LabelerFor    time.Duration // how long pods are created at each rate
	ScalePods     []int         // pods (with bindings) the scale section loads
	ScaleStreams  []int         // concurrent exec sessions the scale section holds
	ScaleHold     time.Duration // how long each ScaleStreams size is held
	// RecordedSessions is how many idle TTY exec sessions recorded-sessions
	// holds (ScaleHold long) through each of its two gateways.
	RecordedSessions int
	// RecordedExecBytes is what each TTY exec session of recorded-exec
	// moves, stdout then stdin; RecordedExecRounds how many per path and
	// protocol, interleaved.
	RecordedExecBytes  int64
	RecordedExecRounds int
}

// Quick checks that every measurement works, in about a minute.
var Quick = Sizes{
	Rounds: 2, RoundDuration: 500 * time.Millisecond, Concurrency: []int{1, 16, 64},
	ListPods: 100, SetupSamples: 5, StreamSamples: 8, JobReplays: 2, ExecBytes: 16 << 20, ExecRounds: 1, StdinBytes: 16 << 20,
	Sessions: 20, HoldFor: 3 * time.Second, LogLines: 50, LogBytes: 4 << 20, MemberEvents: 50,
	ResolverPods: []int{1000, 10000}, LabelerRates: []int{20, 100}, LabelerFor: time.Second,
	ScalePods: []int{1000, 10000}, ScaleStreams: []int{10, 50}, ScaleHold: 2 * time.Second,
	RecordedSessions: 50, RecordedExecBytes: 16 << 20, RecordedExecRounds: 2,
}

// Full is what docs/benchmarks.md reports.
var Full = Sizes{
	Rounds: 4, RoundDuration: 3 * time.Second, Concurrency: []int{1, 16, 64},
	ListPods: 1000, SetupSamples: 40, StreamSamples: 96, JobReplays: 12, ExecBytes: 1 << 30, ExecRounds: 1, StdinBytes: 256 << 20,
	Sessions: 200, HoldFor: 60 * time.Second, LogLines: 300, LogBytes: 64 << 20, MemberEvents: 500,
	ResolverPods: []int{10000, 100000}, LabelerRates: []int{20, 100}, LabelerFor: 5 * time.Second,
	ScalePods: []int{1000, 10000, 100000}, ScaleStreams: []int{10, 100, 1000}, ScaleHold: 15 * time.Second,
	RecordedSessions: 1000, RecordedExecBytes: 256 << 20, RecordedExecRounds: 3,
}

// Names of the objects the runner creates in env.Namespace.
const (
	policyName    = "bench"
	placedLabel   = "bench.karmada-exec-gateway.io/placed"
	listLabel     = "bench.karmada-exec-gateway.io/list"
	shellPod      = "bench-shell"
	logTickPod    = "bench-log-tick"
	logBulkPod    = "bench-log-bulk"
	jobPod        = "bench-job"
	containerName = "main"
)

// Runner runs the measurements against one environment whose gateway is
// running in passthrough mode.
type Runner struct {
	Env   *env.Env
	Sizes Sizes
	// Log receives progress lines; nil discards.
	Log io.Writer
	// SVGDir, when set, receives the scale sections' charts.
	SVGDir string

	member       string // the only cluster bench pods are placed on
	clusterProxy string // what serves the direct path of rewritten routes, checked by Setup
}

// paths are the two clients a passthrough measurement compares.
type paths struct{ gateway, direct *rest.Config }

// clients builds a clientset for each path.
func (p paths) clients() (gateway, direct *kubernetes.Clientset, err error) {
	if gateway, err = kubernetes.NewForConfig(p.gateway); err != nil {
		return nil, nil, err
	}
	if direct, err = kubernetes.NewForConfig(p.direct); err != nil {
		return nil, nil, err
	}
	return gateway, direct, nil
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "bench: "+format+"\n", args...)
	}
}

// unlimited drops client-go's client-side rate limiter, which would
// otherwise cap every path at the same QPS and hide the difference.
func unlimited(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = -1, 0
	c.UserAgent = "bench"
	return c
}

func (r *Runner) passthroughPaths(user string) (paths, error) {
	gw, err := r.Env.GatewayConfig(user)
	if err != nil {
		return paths{}, err
	}
	return paths{gateway: unlimited(gw), direct: unlimited(r.Env.KarmadaConfig(user))}, nil
}

// rewrittenPaths compares the gateway with Karmada's cluster proxy of the
// member the bench pods run on: what the gateway rewrites to.
func (r *Runner) rewrittenPaths(user string) (paths, error) {
	gw, err := r.Env.GatewayConfig(user)
	if err != nil {
		return paths{}, err
	}
	return paths{gateway: unlimited(gw), direct: unlimited(r.Env.ClusterProxyConfig(r.member, user))}, nil
}

// Setup places the bench pods on the first member through a policy that
// selects them by label, so the LIST pods (without the label) stay
// unpropagated templates.
func (r *Runner) Setup(ctx context.Context) error {
	r.member = r.Env.Members()[0]
	if err := r.checkClusterProxy(ctx); err != nil {
		return err
	}
	policy := env.PropagationPolicy(env.Namespace, policyName, []string{r.member})
	spec := policy.Object["spec"].(map[string]any)
	spec["resourceSelectors"] = []any{map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"labelSelector": map[string]any{"matchLabels": map[string]any{placedLabel: "true"}},
	}}
	if err := r.Env.CreatePolicy(ctx, policy); err != nil {
		return err
	}
	admin, err := r.Env.KarmadaClient(env.UserAdmin)
	if err != nil {
		return err
	}
	pods := map[string]string{
		shellPod: `while true; do sleep 1; done`,
		// A numbered line every 20ms, for logs -f.
		logTickPod: `i=0; while true; do echo "tick-$i"; i=$((i+1)); sleep 0.02; done`,
		// A log of LogBytes/100 lines of 100 bytes, then quiet.
		logBulkPod: fmt.Sprintf(`yes %s | head -n %d; while true; do sleep 1; done`, strings.Repeat("x", 99), r.Sizes.LogBytes/100),
		// A GitLab Runner build container: boot lines for the log probe,
		// then a shell reading job scripts from its stdin (attach strategy).
		jobPod: `for i in $(seq 1 12); do echo "boot-$i"; done; exec sh`,
	}
	for name, script := range pods {
		p := env.ShellPod(env.Namespace, name, script)
		p.Labels = map[string]string{placedLabel: "true"}
		p.Spec.Containers[0].Stdin = name == jobPod
		if _, err := admin.CoreV1().Pods(env.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
	}
	for name := range pods {
		if _, err := r.Env.WaitPodRunning(ctx, env.Namespace, name, 2*time.Minute); err != nil {
			return err
		}
	}
	r.logf("bench pods running on %s; creating %d pod templates for LIST", r.member, r.Sizes.ListPods)
	return createPods(ctx, admin, "bench-list", r.Sizes.ListPods, map[string]string{listLabel: "true"})
}

// checkClusterProxy proves that the direct path of rewritten routes is
// Karmada's own aggregated apiserver: karmada-apiserver hands
// cluster.karmada.io to it only through this APIService, so one that is not
// backed by its Service, or not Available, would make every "direct" column
// measure something else.
func (r *Runner) checkClusterProxy(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(r.Env.KarmadaConfig(env.UserAdmin))
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	const name = "v1alpha1.cluster.karmada.io"
	svc, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster proxy APIService: %w", err)
	}
	backend, _, _ := unstructured.NestedString(svc.Object, "spec", "service", "name")
	if backend != "karmada-aggregated-apiserver" {
		return fmt.Errorf("APIService %s is served by %q, not karmada-aggregated-apiserver: the direct path would not be Karmada's cluster proxy", name, backend)
	}
	conditions, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
	available := slices.ContainsFunc(conditions, func(c any) bool {
		m, _ := c.(map[string]any)
		return m["type"] == "Available" && m["status"] == "True"
	})
	if !available {
		return fmt.Errorf("APIService %s is not Available", name)
	}
	r.clusterProxy = fmt.Sprintf("karmada-aggregated-apiserver %s cluster proxy (%s, APIService %s)",
		r.Env.KarmadaCommit(), karmada.ClusterProxyPath(r.member, ""), name)
	return nil
}

// DirectPath says what the direct column of rewritten routes went through,
// for the run's Method lines; "" before Setup.
func (r *Runner) DirectPath() string { return r.clusterProxy }

// proxyNote is the sentence a table's note ends with where Karmada's
// cluster proxy is in the measurement, as the direct column or as the
// gateway's upstream (role).
func (r *Runner) proxyNote(role string) string {
	return " " + role + ": " + r.clusterProxy + "."
}

// createPods creates n unpropagated pod templates named prefix-i with
// labels, 16 at a time.
func createPods(ctx context.Context, client kubernetes.Interface, prefix string, n int, labels map[string]string) error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			p := env.ShellPod(env.Namespace, fmt.Sprintf("%s-%05d", prefix, i), "true")
			p.Labels = labels
			_, err := client.CoreV1().Pods(env.Namespace).Create(ctx, p, metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return fmt.Errorf("create %s pods: %w", prefix, err)
		}
	}
	return nil
}

// procSample is one scrape of the gateway's process and Go metrics.
type procSample struct {
	rss  float64 // process_resident_memory_bytes
	cpu  float64 // process_cpu_seconds_total
	heap float64 // go_memstats_heap_alloc_bytes: live and not yet collected
}

// gatewayProcess reads the environment's gateway's own process metrics.
func (r *Runner) gatewayProcess(ctx context.Context) (procSample, error) {
	return r.processAt(ctx, r.Env.GatewayMetricsURL())
}

// processAt reads the process metrics (the Prometheus process and Go
// collectors of its PID) of the gateway whose metrics port is at base.
func (r *Runner) processAt(ctx context.Context, base string) (procSample, error) {
	v, err := r.scrape(ctx, base, "process_resident_memory_bytes", "process_cpu_seconds_total", "go_memstats_heap_alloc_bytes")
	if err != nil {
		return procSample{}, err
	}
	return procSample{rss: v[0], cpu: v[1], heap: v[2]}, nil
}

// scrape reads samples named as in the text format (name, or
// name{label="value"} with every label) from the /metrics of the gateway
// whose metrics port is at base, in the order of names.
func (r *Runner) scrape(ctx context.Context, base string, names ...string) ([]float64, error) {
	client, err := r.metricsClient()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape gateway metrics: %s", resp.Status)
	}
	return parseGauges(resp.Body, names...)
}
