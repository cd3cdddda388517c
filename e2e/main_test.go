package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

// testEnv is shared by every test in the package: starting the topology
// costs seconds, and tests keep to their own pod and policy names.
var testEnv *env.Env

// TestMain starts the environment with a gateway built from ./cmd/gateway.
// A gateway that does not build, or any part that does not come up, fails
// the run: nothing here skips.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if ownEnvironmentOnly(flag.Lookup("test.run").Value.String()) {
		// The selected test starts the environment it uses: the shared one
		// would only take the machine's cores from it.
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := env.Start(ctx, env.Options{
		Gateway: env.GatewayOptions{Enabled: true},
		Log:     os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: start e2e environment:", err)
		return 1
	}
	testEnv = e
	code := m.Run()
	if err := e.StopGatewayAndCheckRaces(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	if code != 0 {
		e.WriteLogTails(os.Stderr, 80)
	}
	e.Stop()
	return code
}

// ownEnvironmentTests start an environment of their own: hack/e2e.sh runs
// them in test processes of their own, which need no shared environment.
// TestPullMember makes its own testEnv while it runs.
var ownEnvironmentTests = map[string]bool{
	"TestPullMember":                     true,
	"TestReadmeHelmInstallOnHostCluster": true,
	"TestDemoStopsWithItsParent":         true,
}

// ownEnvironmentOnly reports whether the -run pattern selects only
// ownEnvironmentTests: a name, ^Name$, or ^(A|B)$.
func ownEnvironmentOnly(run string) bool {
	top, _, _ := strings.Cut(run, "/")
	top = strings.TrimSuffix(strings.TrimPrefix(top, "^"), "$")
	top = strings.TrimSuffix(strings.TrimPrefix(top, "("), ")")
	for _, name := range strings.Split(top, "|") {
		if !ownEnvironmentTests[name] {
			return false
		}
	}
	return true
}
