package env

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
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
