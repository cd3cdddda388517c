package env

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// ExtraGateway is a second gateway process beside the environment's own,
// built from the same binary, for measurements that compare two gateway
// configurations side by side (the bench's stream-setup section runs one
// in authorize mode while the environment's runs in passthrough). It runs
// no labeler, so it takes no Lease and writes nothing to karmada-apiserver.
type ExtraGateway struct {
	e *Env
	g *gateway
}

// StartExtraGateway starts a gateway named name (its log is <name>.log)
// with the environment's extra gateway flags (GatewayOptions.Args) and args
// after the flags it sets; in authorize mode it gets
// the environment's client CA as the main gateway does. It is pinned like
// the main gateway (GatewayOptions.CPUs). Stop it when done; Env.Stop does
// not know it.
func (e *Env) StartExtraGateway(ctx context.Context, name string, args ...string) (*ExtraGateway, error) {
	e.gwMu.Lock()
	if e.gatewayBin == "" {
		if err := e.buildGateway(ctx); err != nil {
			e.gwMu.Unlock()
			return nil, err
		}
	}
	bin := e.gatewayBin
	e.gwMu.Unlock()
	return e.startExtraGateway(ctx, name, bin, args)
}

// StartExtraGatewayWithoutRace is StartExtraGateway with a gateway built
// without the race detector whatever E2E_GATEWAY_RACE says: the image's
// (E2E_HOST_GATEWAY_BINARY), the environment's own when it has no -race,
// else one built now. For measurements of memory, which -race multiplies.
func (e *Env) StartExtraGatewayWithoutRace(ctx context.Context, name string, args ...string) (*ExtraGateway, error) {
	e.gwMu.Lock()
	if e.gatewayWithoutRace == "" {
		switch {
		case e.opts.Host.GatewayBinary != "":
			e.gatewayWithoutRace = e.opts.Host.GatewayBinary
		case !e.opts.Gateway.Race && e.gatewayBin != "":
			e.gatewayWithoutRace = e.gatewayBin
		default:
			bin := filepath.Join(e.workDir, "gateway-without-race")
			if err := BuildGateway(ctx, e.opts.Gateway.SourceDir, bin); err != nil {
				e.gwMu.Unlock()
				return nil, err
			}
			e.gatewayWithoutRace = bin
		}
	}
	bin := e.gatewayWithoutRace
	e.gwMu.Unlock()
	return e.startExtraGateway(ctx, name, bin, args)
}

func (e *Env) startExtraGateway(ctx context.Context, name, bin string, args []string) (*ExtraGateway, error) {
	g := &gateway{extraArgs: slices.Clone(args), metricsScheme: "http"}
	var err error
	if g.port, err = freePort(); err != nil {
		return nil, err
	}
	if g.metricsPort, err = freePort(); err != nil {
		return nil, err
	}
	if g.serving, err = e.ca.issue(e.pkiDir, name, "karmada-exec-gateway", nil, loopbackHosts); err != nil {
		return nil, err
	}
	g.proc = &process{name: name, path: bin, logPath: filepath.Join(e.logDir, name+".log"), cpus: e.opts.Gateway.CPUs}
	g.proc.args = append(e.gatewayServingArgs(g.port, g.metricsPort, g.serving),
		"--enable-labeler=false",
		"--leader-elect=false",
	)
	g.proc.args = append(g.proc.args, append(slices.Clone(e.opts.Gateway.Args), args...)...)
	if authMode(e.opts.Gateway.AuthMode, args) == "authorize" && !slices.ContainsFunc(args, isFlag("client-ca-file")) {
		g.proc.args = append(g.proc.args, "--client-ca-file="+filepath.Join(e.pkiDir, "ca.crt"))
	}
	if err := g.proc.start(); err != nil {
		return nil, err
	}
	x := &ExtraGateway{e: e, g: g}
	if err := e.waitGatewayReady(ctx, g); err != nil {
		x.Stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return x, nil
}

// URL is the extra gateway's base URL.
func (x *ExtraGateway) URL() string { return "https://" + hostPort(x.g.port) }

// Config is a rest.Config for user against the extra gateway.
func (x *ExtraGateway) Config(user string) *rest.Config { return x.e.restConfig(x.URL(), user) }

// MetricsURL is the base URL of the extra gateway's metrics and health
// port (/metrics, /readyz), in the scheme it turned out to serve.
func (x *ExtraGateway) MetricsURL() string {
	return x.g.metricsScheme + "://" + hostPort(x.g.metricsPort)
}

// PID is the extra gateway's process id.
func (x *ExtraGateway) PID() int { return x.g.proc.pid() }

// Stop stops the extra gateway (SIGTERM, then SIGKILL after 5s).
func (x *ExtraGateway) Stop() { x.g.proc.stop(5 * time.Second) }

// Terminate sends SIGTERM, as a rollout does, and waits up to within for
// the process to exit by itself, then sends SIGKILL, as the kubelet does at
// the end of a pod's terminationGracePeriodSeconds. It reports whether the
// process exited by itself, and when.
func (x *ExtraGateway) Terminate(within time.Duration) (exited bool, took time.Duration) {
	p := x.g.proc
	done, pid := p.exited(), p.pid()
	start := time.Now()
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
		took = time.Since(start)
		p.stop(0) // marks it stopped; reaps what it left in its group
		return true, took
	case <-time.After(within):
		p.kill()
		return false, time.Since(start)
	}
}

// ExitError is how the extra gateway's last run ended: nil for exit status
// 0 (or while it runs), else the wait's error (*exec.ExitError).
func (x *ExtraGateway) ExitError() error {
	p := x.g.proc
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL: a crash, an OOM kill.
func (x *ExtraGateway) Kill() { x.g.proc.kill() }
