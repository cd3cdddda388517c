package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// pastOldGrace is how long the test's job runs: longer than the 30 s the
// chart drained for before its default became the executors' job timeout.
const pastOldGrace = 35 * time.Second

// TestRolloutDrainOutlastsACIJob: a gateway with the chart's default drain
// (values.yaml's shutdownGracePeriodSeconds) gets SIGTERM, as a rollout
// sends it, while a CI job runs through it: GitLab Runner's legacy
// strategy, a SPDY exec of sh whose script prints a line a second for
// longer than the chart's former 30 s drain. Its /readyz says 503 at once
// (no new work comes to it), the job runs to its end with every line and
// exit status 0, and the gateway then exits by itself, with status 0: a
// drain that ran its course is no failure.
func TestRolloutDrainOutlastsACIJob(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "gateway", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		ShutdownGracePeriodSeconds int `json:"shutdownGracePeriodSeconds"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(values.ShutdownGracePeriodSeconds) * time.Second
	if grace <= pastOldGrace {
		t.Fatalf("the chart drains for %s, which a %s job outlasts", grace, pastOldGrace)
	}
	const pod = "rollout-job"
	placePod(t, sleepPod(pod), []string{"member1"}, "member1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	gw, err := testEnv.StartExtraGateway(ctx, "gateway-rollout", fmt.Sprintf("--shutdown-grace-period=%s", grace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	client := gatewayClientFor(t, gw.Config(env.UserExecOnly))
	lines := int(pastOldGrace / time.Second)
	script := fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo job-line-$i; sleep 1; i=$((i+1)); done; echo job-done`, lines)
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(env.Namespace).Name(pod).SubResource("exec").
		Param("command", "sh").Param("command", "-c").Param("command", script).Param("stdout", "true").URL()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- execExecutor(t, "spdy", gw.Config(env.UserExecOnly), u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
	}()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "job-line-1\n"), nil
	}); err != nil {
		t.Fatalf("the job did not start: %q", out.String())
	}

	terminated := make(chan time.Duration, 1)
	go func() {
		exited, took := gw.Terminate(grace + 20*time.Second)
		if !exited {
			took = -1
		}
		terminated <- took
	}()
	waitDraining(ctx, t, gw) // /readyz says 503 at once

	jobErr := <-done
	for i := 1; i <= lines; i++ {
		if !strings.Contains(out.String(), fmt.Sprintf("job-line-%d\n", i)) {
			t.Errorf("the job's output lacks line %d: %q", i, out.String())
			break
		}
	}
	if jobErr != nil || !strings.HasSuffix(out.String(), "job-done\n") {
		t.Errorf("the job ended with %v, output ending %q; want it whole, exit status 0", jobErr, out.String()[max(0, len(out.String())-40):])
	}
	took := <-terminated
	switch {
	case took < 0:
		t.Errorf("the gateway did not exit within its grace period after the job ended")
	case took < pastOldGrace-5*time.Second:
		t.Errorf("the gateway exited %s after SIGTERM, before the job could have ended", took)
	}
	if err := gw.ExitError(); err != nil {
		t.Errorf("the gateway exited with %v after draining, want status 0", err)
	}
}
