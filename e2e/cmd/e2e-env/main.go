// Command e2e-env is `make demo`: it starts the end-to-end topology (etcd,
// karmada-apiserver, two members each with a kubelet on its own containerd,
// real Karmada's
// aggregated apiserver, controller-manager, scheduler and webhook, and the
// gateway), propagates a pod, and runs the real kubectl exec and logs
// through the gateway — next to the same exec against karmada-apiserver,
// which fails as it does for every executor today. Then it waits for Ctrl-C
// (or SIGINT/SIGTERM) so you can try it yourself, and tears everything down:
// containers, sandboxes, containerd, bridges and mounts included.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

func main() {
	noWait := flag.Bool("no-wait", false, "exit after the demo instead of waiting for Ctrl-C (CI smoke)")
	keep := flag.Bool("keep", false, "keep the work directory (logs, kubeconfigs) after exit")
	workDir := flag.String("work-dir", "", "work directory (default: a new temporary directory)")
	authMode := flag.String("auth-mode", "passthrough", "gateway --auth-mode: passthrough or authorize")
	flag.Parse()

	// The process the user started (make demo, go run) may be the one
	// signalled, and neither passes SIGTERM on: when it dies, this process
	// gets SIGTERM and tears the environment down all the same.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getppid() == 1 {
		stop() // the parent died before the line above: nothing would signal us
		fmt.Fprintln(os.Stderr, "e2e-env: the process that started this one is gone")
		os.Exit(1)
	}
	if err := run(ctx, *workDir, *keep, *authMode, *noWait); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-env:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, workDir string, keep bool, authMode string, noWait bool) (err error) {
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	e, err := env.Start(startCtx, env.Options{
		WorkDir:     workDir,
		KeepWorkDir: keep,
		Gateway:     env.GatewayOptions{Enabled: true, AuthMode: authMode},
		Log:         os.Stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			e.WriteLogTails(os.Stderr, 40)
		}
		e.Stop()
	}()

	d := demo{e: e, ctx: ctx, admin: e.GatewayKubeconfig(env.UserAdmin), execOnly: e.GatewayKubeconfig(env.UserExecOnly)}
	if err := d.run(); err != nil {
		return err
	}

	fmt.Printf(`
The environment is up. Try it:

  export KUBECONFIG=%s        # admin, through the gateway
  export KUBECONFIG=%s    # exec-only: pods + pods/exec in namespace e2e
  %s exec -it demo -- sh
  %s logs -f demo

  karmada-apiserver directly: %s
  member kubeconfigs:         %s
  logs:                       %s
`, d.admin, d.execOnly, e.Kubectl(), e.Kubectl(), e.Kubeconfig(env.UserAdmin), e.MemberKubeconfig("member1"), e.LogDir())
	if noWait {
		return nil
	}
	fmt.Println("\nPress Ctrl-C to stop and clean up.")
	<-ctx.Done()
	fmt.Println("\nstopping...")
	return nil
}

type demo struct {
	e               *env.Env
	ctx             context.Context
	admin, execOnly string
}

func (d demo) run() error {
	dir := filepath.Join(d.e.WorkDir(), "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := writeYAML(policy, env.PropagationPolicy(env.Namespace, "demo", d.e.Members())); err != nil {
		return err
	}
	pod := filepath.Join(dir, "pod.yaml")
	script := `echo "hello from $(hostname)"; while true; do date; sleep 2; done`
	if err := writeYAML(pod, env.ShellPod(env.Namespace, "demo", script)); err != nil {
		return err
	}

	if err := d.kubectl(d.admin, "apply", "-f", policy); err != nil {
		return err
	}
	if err := d.kubectl(d.admin, "apply", "-f", pod); err != nil {
		return err
	}
	if _, err := d.e.WaitPodRunning(d.ctx, env.Namespace, "demo", 60*time.Second); err != nil {
		return err
	}
	if err := d.kubectl(d.admin, "get", "pod", "demo", "-o", "wide"); err != nil {
		return err
	}
	clusters, err := d.e.PodClusters(d.ctx, env.Namespace, "demo")
	if err != nil {
		return err
	}
	fmt.Printf("# Karmada scheduled pod demo to %s\n\n", strings.Join(clusters, ","))

	fmt.Println("# karmada-apiserver itself cannot exec into a resource template:")
	if err := d.kubectl(d.e.Kubeconfig(env.UserExecOnly), "exec", "demo", "--", "true"); err == nil {
		return errors.New("exec against karmada-apiserver succeeded; the demo expected it to fail")
	}
	fmt.Println("# the gateway routes the same command to the member cluster:")
	if err := d.kubectl(d.execOnly, "exec", "demo", "--", "sh", "-c", `echo "I run in container $(hostname) at $(ip -4 addr show eth0 | sed -n 's/.*inet \([0-9.\/]*\).*/\1/p')"`); err != nil {
		return err
	}
	return d.kubectl(d.execOnly, "logs", "demo", "--tail=5")
}

// kubectl runs bin/kubectl and prints the command line and what it printed.
func (d demo) kubectl(kubeconfig string, args ...string) error {
	fmt.Printf("$ KUBECONFIG=%s kubectl %s\n", kubeconfig, strings.Join(quote(args), " "))
	stdout, stderr, err := d.e.RunKubectl(d.ctx, kubeconfig, nil, args...)
	fmt.Print(stdout)
	fmt.Print(stderr)
	fmt.Println()
	return err
}

func quote(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " $\"'();") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}

func writeYAML(path string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
