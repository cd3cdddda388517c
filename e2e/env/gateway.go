package env

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// gateway is the gateway process. Its ports and certificate are chosen once,
// so a restart listens where clients already point.
type gateway struct {
	proc          *process
	port          int
	metricsPort   int
	serving       *keyPair
	extraArgs     []string
	metricsScheme string
}

// BuildGateway builds ./cmd/gateway of the root module at sourceDir into
// out. Tests call it (or let Start do it) so a gateway that does not build
// fails the test rather than skipping it.
func BuildGateway(ctx context.Context, sourceDir, out string) error {
	return buildGateway(ctx, sourceDir, out, false)
}

func buildGateway(ctx context.Context, sourceDir, out string, race bool) error {
	if race {
		return GoBuild(ctx, sourceDir, "./cmd/gateway", out, "gateway-race", "-race")
	}
	return GoBuild(ctx, sourceDir, "./cmd/gateway", out, "gateway")
}

func (e *Env) buildGateway(ctx context.Context) error {
	if e.opts.Gateway.Binary != "" {
		e.gatewayBin = e.opts.Gateway.Binary
		return nil
	}
	if e.opts.Gateway.SourceDir == "" {
		return errors.New("gateway: neither Binary nor SourceDir is set")
	}
	out := filepath.Join(e.workDir, "gateway")
	if e.opts.Gateway.Race {
		e.logf("building the gateway with -race (E2E_GATEWAY_RACE=1): a race it reports fails the run")
	}
	if err := buildGateway(ctx, e.opts.Gateway.SourceDir, out, e.opts.Gateway.Race); err != nil {
		return err
	}
	e.gatewayBin = out
	return nil
}

// StartGateway starts the gateway (building it first if Start did not) and
// waits for /readyz on its metrics port. args, if any, replace the extra
// flags of Options.Gateway.Args for this and later starts.
func (e *Env) StartGateway(ctx context.Context, args ...string) error {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gatewayBin == "" {
		if err := e.buildGateway(ctx); err != nil {
			return err
		}
	}
	if e.gateway == nil {
		g := &gateway{extraArgs: slices.Clone(e.opts.Gateway.Args), metricsScheme: "http"}
		var err error
		if g.port, err = freePort(); err != nil {
			return err
		}
		if g.metricsPort, err = freePort(); err != nil {
			return err
		}
		if g.serving, err = e.ca.issue(e.pkiDir, "gateway", "karmada-exec-gateway", nil, loopbackHosts); err != nil {
			return err
		}
		if err := e.writeGatewayKubeconfigs("https://" + hostPort(g.port)); err != nil {
			return err
		}
		g.proc = &process{name: "gateway", path: e.gatewayBin, logPath: filepath.Join(e.logDir, "gateway.log"), cpus: e.opts.Gateway.CPUs}
		e.gateway = g
	}
	g := e.gateway
	if len(args) > 0 {
		g.extraArgs = slices.Clone(args)
	}
	g.proc.args = append(e.gatewayServingArgs(g.port, g.metricsPort, g.serving),
		"--leader-elect",
		"--leader-election-namespace="+KarmadaSystem,
	)
	g.proc.args = append(g.proc.args, g.extraArgs...)
	// The gateway refuses a client CA in passthrough mode (a client
	// certificate cannot be forwarded upstream), so it is given only when
	// the mode in effect, after the extra flags, is authorize.
	if authMode(e.opts.Gateway.AuthMode, g.extraArgs) == "authorize" && !slices.ContainsFunc(g.extraArgs, isFlag("client-ca-file")) {
		g.proc.args = append(g.proc.args, "--client-ca-file="+filepath.Join(e.pkiDir, "ca.crt"))
	}
	if err := g.proc.start(); err != nil {
		return err
	}
	return e.waitGatewayReady(ctx, g)
}

// authMode is the --auth-mode in effect: the last one in args wins, as with
// the flag package.
func authMode(def string, args []string) string {
	mode := def
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--auth-mode=") || strings.HasPrefix(a, "-auth-mode="):
			mode = a[strings.Index(a, "=")+1:]
		case (a == "--auth-mode" || a == "-auth-mode") && i+1 < len(args):
			mode = args[i+1]
		}
	}
	return mode
}

func isFlag(name string) func(string) bool {
	return func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == name || strings.HasPrefix(a, name+"=")
	}
}

// waitGatewayReady polls /readyz on the metrics port, switching to HTTPS if
// the port turns out to serve TLS (the gateway's choice, not ours).
func (e *Env) waitGatewayReady(ctx context.Context, g *gateway) error {
	client := e.httpClient()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !g.proc.running() {
			return false, g.proc.exitErr()
		}
		url := g.metricsScheme + "://" + hostPort(g.metricsPort) + "/readyz"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "HTTPS server") {
			g.metricsScheme = "https"
		}
		if resp.StatusCode == http.StatusOK {
			return true, nil
		}
		last = strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(body))
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for gateway /readyz (last answer: %s; log %s): %w", last, g.proc.logPath, err)
	}
	return nil
}

// StopGateway stops the gateway process (SIGTERM, then SIGKILL after 10s,
// so a graceful drain of streams can be observed).
func (e *Env) StopGateway() {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gateway != nil {
		e.gateway.proc.stop(10 * time.Second)
	}
}

// RestartGateway stops and starts the gateway on the same ports. args, if
// any, replace the extra flags (e.g. "--auth-mode=authorize").
func (e *Env) RestartGateway(ctx context.Context, args ...string) error {
	e.StopGateway()
	return e.StartGateway(ctx, args...)
}

// raceReportStart opens each report of Go's race detector.
const raceReportStart = "WARNING: DATA RACE"

// GatewayDataRaces returns the race detector's reports in the gateway's log
// so far (none unless Options.Gateway.Race built it with -race). Stop the
// gateway first to include races of its shutdown.
func (e *Env) GatewayDataRaces() ([]string, error) {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gateway == nil {
		return nil, nil
	}
	log, err := os.ReadFile(e.gateway.proc.logPath)
	if err != nil {
		return nil, fmt.Errorf("read gateway log: %w", err)
	}
	var reports []string
	for _, part := range strings.Split(string(log), raceReportStart)[1:] {
		// A report ends with a line of '=' (the detector's separator).
		report, _, _ := strings.Cut(part, "\n==================")
		reports = append(reports, raceReportStart+report)
	}
	return reports, nil
}

// StopGatewayAndCheckRaces stops a gateway built with -race, so races of its
// drain are reported too, and returns what the race detector wrote in its
// log (every gateway process the environment started appends there) as an
// error. For a gateway built without -race it does nothing.
func (e *Env) StopGatewayAndCheckRaces() error {
	if !e.GatewayRace() {
		return nil
	}
	e.StopGateway()
	races, err := e.GatewayDataRaces()
	if err != nil || len(races) > 0 {
		return fmt.Errorf("the gateway built with -race (E2E_GATEWAY_RACE=1) reported %d data races (%v):\n%s", len(races), err, strings.Join(races, "\n"))
	}
	return nil
}

// GatewayRace reports whether the gateway is built with -race.
func (e *Env) GatewayRace() bool { return e.opts.Gateway.Race }

// GatewayRunning reports whether the gateway process is up.
func (e *Env) GatewayRunning() bool {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	return e.gateway != nil && e.gateway.proc.running()
}

// GatewayPID is the gateway process's id (0 before it first starts): a
// test that must heal without a gateway restart compares it.
func (e *Env) GatewayPID() int {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gateway == nil {
		return 0
	}
	return e.gateway.proc.pid()
}

// GatewayURL is the gateway's base URL ("" before it first starts).
func (e *Env) GatewayURL() string {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gateway == nil {
		return ""
	}
	return "https://" + hostPort(e.gateway.port)
}

// GatewayMetricsURL is the base URL of the gateway's metrics and health port.
func (e *Env) GatewayMetricsURL() string {
	e.gwMu.Lock()
	defer e.gwMu.Unlock()
	if e.gateway == nil {
		return ""
	}
	return e.gateway.metricsScheme + "://" + hostPort(e.gateway.metricsPort)
}

// GatewayConfig is a rest.Config for user against the gateway.
func (e *Env) GatewayConfig(user string) (*rest.Config, error) {
	url := e.GatewayURL()
	if url == "" {
		return nil, errors.New("gateway was never started")
	}
	return e.restConfig(url, user), nil
}

// gatewayServingArgs are the flags every gateway process of the
// environment starts with: its identity in karmada-apiserver, where it
// serves and with which certificate, and the environment's auth mode.
func (e *Env) gatewayServingArgs(port, metricsPort int, serving *keyPair) []string {
	return []string{
		"--kubeconfig=" + e.Kubeconfig(UserGateway),
		"--bind-address=" + hostPort(port),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-key-file=" + serving.KeyFile,
		"--metrics-bind-address=" + hostPort(metricsPort),
		"--auth-mode=" + e.opts.Gateway.AuthMode,
	}
}
