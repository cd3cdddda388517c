package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// NodeClient measures what a real client from another language pays to
// run an exec: @kubernetes/client-node 1.4.0 on Node.js (e2e/nodeclient,
// the library GitHub's runner-container-hooks use; Node leaves
// TCP_NODELAY off while TLS shakes hands), an exec of `true` on its new
// WebSocket connection from the call to the exit status, through the
// gateway in both modes, Karmada's cluster proxy and the member,
// interleaved.
func (r *Runner) NodeClient(ctx context.Context) (*Table, error) {
	dir, err := filepath.Abs("nodeclient")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@kubernetes", "client-node")); err != nil {
		return nil, fmt.Errorf("e2e/nodeclient has no node_modules: make node-client installs them")
	}
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	var gws extraGateways
	defer gws.stop()
	authorize, err := gws.start(ctx, r.Env, "gateway-authorize-node", "--auth-mode=authorize")
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "bench-nodeclient-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	targets := []struct {
		name string
		cfg  *rest.Config
	}{
		{"cluster proxy", p.direct},
		{"gateway passthrough", p.gateway},
		{"gateway authorize", authorize.Config(env.UserExecOnly)},
		{"member", r.Env.MemberConfig(r.member)},
	}
	kubeconfigs := make([]string, len(targets))
	for i, tg := range targets {
		kubeconfigs[i] = filepath.Join(tmp, strconv.Itoa(i)+".yaml")
		if err := writeKubeconfig(tg.cfg, kubeconfigs[i]); err != nil {
			return nil, err
		}
	}
	per := max(2, r.Sizes.StreamSamples/r.Sizes.Rounds)
	samples := make([][]time.Duration, len(targets))
	var firstErr error
	fns := make([]func() Load, len(targets))
	for i := range targets {
		fns[i] = func() Load {
			took, err := runNodeTiming(ctx, dir, kubeconfigs[i], per)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", targets[i].name, err)
			}
			samples[i] = append(samples[i], took...)
			return Load{}
		}
	}
	r.logf("node-client: %d rounds of %d execs per path", r.Sizes.Rounds, per)
	InterleaveAll(r.Sizes.Rounds, fns...) // one path at a time, so samples need no lock
	if firstErr != nil {
		return nil, firstErr
	}
	t := &Table{
		Title:   "@kubernetes/client-node: an exec of `true`, call to exit status",
		Columns: []string{"path", "p50", "p90", "p50 ratio", "p90 ratio"},
		Note: fmt.Sprintf("%d execs per path in %d interleaved rounds, each round one Node.js process whose first exec is a warm-up, left out; "+
			"each exec on the new WebSocket connection (TCP, TLS, the upgrade) client-node opens for it, v5.channel.k8s.io. "+
			"Ratios are to the cluster proxy in the same run. The member's kube-apiserver as user admin.", len(samples[0]), r.Sizes.Rounds) +
			r.proxyNote("Cluster proxy"),
	}
	ref50, ref90 := Percentile(samples[0], 50), Percentile(samples[0], 90)
	for i, tg := range targets {
		p50, p90 := Percentile(samples[i], 50), Percentile(samples[i], 90)
		t.Add(tg.name, FormatDuration(p50), FormatDuration(p90),
			FormatRatio(Ratio(float64(p50), float64(ref50))), FormatRatio(Ratio(float64(p90), float64(ref90))))
	}
	return t, nil
}

// runNodeTiming runs e2e/nodeclient/timing.mjs for n timed execs.
func runNodeTiming(ctx context.Context, dir, kubeconfig string, n int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n+1)*30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "timing.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "NAMESPACE="+env.Namespace, "POD="+shellPod, "ROUNDS="+strconv.Itoa(n))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("node timing.mjs: %w: %s", err, stderr.String())
	}
	var ms []float64
	if err := json.Unmarshal(stdout.Bytes(), &ms); err != nil {
		return nil, fmt.Errorf("node timing.mjs printed %q: %w", stdout.String(), err)
	}
	took := make([]time.Duration, len(ms))
	for i, v := range ms {
		took[i] = time.Duration(v * float64(time.Millisecond))
	}
	return took, nil
}

// writeKubeconfig writes cfg (its server, CA, token or client
// certificate) as a kubeconfig for a client of another language.
func writeKubeconfig(cfg *rest.Config, path string) error {
	k := clientcmdapi.NewConfig()
	k.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	k.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	k.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: env.Namespace}
	k.CurrentContext = "c"
	return clientcmd.WriteToFile(*k, path)
}
