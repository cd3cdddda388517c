package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// nodeClientResult is what e2e/nodeclient/client.mjs prints: each step's
// result, which depends on the pod only.
type nodeClientResult struct {
	Stdin struct {
		Outcome
		Bytes int  `json:"bytes"`
		Whole bool `json:"whole"`
	} `json:"stdin"`
	ExitCode struct {
		Outcome
		Stdout string `json:"stdout"`
		Stderr string `json:"stderr"`
	} `json:"exitCode"`
	Copy struct {
		Error         string  `json:"error,omitempty"`
		Mkdir         Outcome `json:"mkdir"`
		ToPod         Outcome `json:"toPod"`
		FromPod       Outcome `json:"fromPod"`
		PodListing    string  `json:"podListing"`
		BackListing   string  `json:"backListing"`
		SourceListing string  `json:"sourceListing"`
	} `json:"copy"`
	Watch struct {
		Error string `json:"error,omitempty"`
		Type  string `json:"type"`
		Name  string `json:"name"`
	} `json:"watch"`
	Logs struct {
		Error    string   `json:"error,omitempty"`
		Followed []string `json:"followed"`
	} `json:"logs"`
	PortForward struct {
		Error string `json:"error,omitempty"`
		Bytes int    `json:"bytes"`
		Whole bool   `json:"whole"`
	} `json:"portForward"`
}

// Outcome is an exec's status as the program reads it.
type Outcome struct {
	Error    string  `json:"error,omitempty"`
	Status   string  `json:"status"`
	Reason   *string `json:"reason"`
	ExitCode int     `json:"exitCode"`
}

// TestNodeClient runs a Node.js program on @kubernetes/client-node 1.x,
// the client GitHub's runner-container-hooks (k8s mode) are built on,
// doing what the hooks do with a job pod (e2e/nodeclient/client.mjs): an
// exec with stdin over WebSocket v5 and its close, exit codes, files
// copied with tar over exec both ways, a watch, a log follow, and a
// port-forward. Its results through the gateway, in both auth modes, must
// equal its results against the member directly, and be right.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	dir := nodeClient(t)
	const name, member = "node-client", "member1"
	pod := env.ShellPod(env.Namespace, name, `for i in 1 2 3 4 5; do echo line-$i; done; while true; do sleep 1; done`)
	pod.Spec.Containers = append(pod.Spec.Containers, env.LocalContainer("echo", images.Echo, tcpecho))
	placePod(t, pod, []string{member}, member)
	port := echoPort(t.Context(), t, name, "echo")
	authorize, err := testEnv.StartExtraGateway(t.Context(), "gateway-node-authorize", "--auth-mode=authorize")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(authorize.Stop)
	direct := runNodeClient(t, dir, testEnv.MemberKubeconfig(member), name, port, "direct")
	checkNodeClientResult(t, direct)
	for _, gw := range []struct{ name, kubeconfig string }{
		{"passthrough", testEnv.GatewayKubeconfig(env.UserExecOnly)},
		{"authorize", serverKubeconfig(t, testEnv.GatewayKubeconfig(env.UserExecOnly), authorize.URL())},
	} {
		t.Run(gw.name, func(t *testing.T) {
			got := runNodeClient(t, dir, gw.kubeconfig, name, port, gw.name)
			if !reflect.DeepEqual(got, direct) {
				g, _ := json.MarshalIndent(got, "", "  ")
				d, _ := json.MarshalIndent(direct, "", "  ")
				t.Errorf("through the gateway the program got\n%s\nagainst the member directly\n%s", g, d)
			}
		})
	}
}

// checkNodeClientResult fails t unless every step did what it should.
func checkNodeClientResult(t *testing.T, r nodeClientResult) {
	t.Helper()
	success := Outcome{Status: "Success"}
	if r.Stdin.Outcome != success || !r.Stdin.Whole || r.Stdin.Bytes != 1<<20+len("stdin-closed\n") {
		t.Errorf("exec with stdin: %+v, want Success and the 1 MiB sent back whole, then stdin-closed", r.Stdin)
	}
	nonZero := "NonZeroExitCode"
	if e := r.ExitCode; e.Status != "Failure" || e.Reason == nil || *e.Reason != nonZero || e.ExitCode != 3 || e.Stdout != "out\n" || e.Stderr != "err\n" {
		t.Errorf("exec of exit 3: %+v, want a NonZeroExitCode Failure with exit code 3, out and err", e)
	}
	c := r.Copy
	if c.Error != "" || c.Mkdir != success || c.ToPod != success || c.FromPod != success ||
		c.SourceListing == "" || c.PodListing != c.SourceListing || c.BackListing != c.SourceListing {
		t.Errorf("tar copies: %+v, want each exec Success and the same files (by sha256) in the pod and back", c)
	}
	if r.Watch.Error != "" || r.Watch.Type != "ADDED" || r.Watch.Name != "node-client" {
		t.Errorf("watch: %+v, want ADDED node-client", r.Watch)
	}
	if want := []string{"line-1", "line-2", "line-3", "line-4", "line-5"}; r.Logs.Error != "" || !reflect.DeepEqual(r.Logs.Followed, want) {
		t.Errorf("log follow: %+v, want %q", r.Logs, want)
	}
	if p := r.PortForward; p.Error != "" || !p.Whole || p.Bytes != 256<<10 {
		t.Errorf("port-forward: %+v, want 256 KiB echoed whole", p)
	}
}

// runNodeClient runs the program with kubeconfig against pod.
func runNodeClient(t *testing.T, dir, kubeconfig, pod string, echoPort int, run string) nodeClientResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "NAMESPACE="+env.Namespace, "POD="+pod,
		"ECHO_PORT="+strconv.Itoa(echoPort), "RUN="+run)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		hint := ""
		if exitCode(err) == 13 {
			hint = " (Node's exit code 13: a top-level await never settled)"
		}
		t.Fatalf("node client.mjs (%s): %v%s\nstdout: %s\nstderr: %s", run, err, hint, stdout.String(), stderr.String())
	}
	var r nodeClientResult
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("read what node client.mjs (%s) printed: %v\nstdout: %s\nstderr: %s", run, err, stdout.String(), stderr.String())
	}
	if e := strings.TrimSpace(stderr.String()); e != "" {
		t.Logf("%s, on stderr: %s", run, e)
	}
	return r
}

var nodeClientOnce struct {
	sync.Once
	err error
}

// nodeClient is e2e/nodeclient with its node_modules, which `make tools`
// installs (npm ci, from npm's cache once warm); run alone, the test
// installs them the same way.
func nodeClient(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("nodeclient")
	if err != nil {
		t.Fatal(err)
	}
	nodeClientOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@kubernetes", "client-node", "package.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeClientOnce.err = err
			t.Logf("npm ci: %s", out)
		}
	})
	if nodeClientOnce.err != nil {
		t.Fatalf("install e2e/nodeclient's packages (make tools does): %v", nodeClientOnce.err)
	}
	return dir
}
