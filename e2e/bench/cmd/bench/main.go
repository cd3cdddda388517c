// Command bench measures the gateway against the direct paths on the e2e
// environment and prints Markdown tables (make bench). It exits non-zero
// only when a measurement could not be made, never because of a figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/bench"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

func main() {
	quick := flag.Bool("quick", false, "small sizes and short rounds: checks that every measurement works")
	only := flag.String("only", "", "comma-separated sections to run (default all): "+sectionNames())
	out := flag.String("out", "", "also write the tables to this file")
	verbose := flag.Bool("v", false, "print environment startup steps")
	svgDir := flag.String("svg-dir", "", "write the scale sections' charts (scale-pods.svg, scale-streams.svg) to this directory")
	gatewayCPU := flag.String("gateway-cpu", os.Getenv("BENCH_GATEWAY_CPU"), "cpuset mode: pin the gateway processes to these CPUs (taskset -c list, e.g. 1) and the bench with everything it starts to the others (default $BENCH_GATEWAY_CPU; empty: no pinning)")
	pullProxy := flag.String("pull-member", "", "run the first member in Pull mode behind a proxy of this kind (http: tinyproxy's HTTP CONNECT, socks5: Dante), so the bench pods' rewritten paths cross it; empty: every member in Push mode")
	gatewayV := flag.Int("gateway-v", 0, "the gateways' klog verbosity; 4 logs each upgrade's phases (check, connect, TLS handshake, upstream answer), at some cost to the figures")
	flag.Parse()
	os.Exit(run(*quick, *only, *out, *svgDir, *gatewayCPU, *pullProxy, *gatewayV, *verbose))
}

// pinRest pins this process and its descendants, every thread, to the
// CPUs not in gatewayCPUs, except the gateway (pid gateway), which env
// started on gatewayCPUs. It runs once the environment is up (so that its
// start is not squeezed onto fewer CPUs) and before the bench pods exist:
// processes started later (containerd's shims and containers, exec'd
// commands) inherit the affinity of their pinned parent. It returns the
// CPUs the rest runs on.
func pinRest(gatewayCPUs string, gateway int) (string, error) {
	taken := map[string]bool{}
	for _, c := range strings.Split(gatewayCPUs, ",") {
		if _, err := strconv.Atoi(c); err != nil {
			return "", fmt.Errorf("-gateway-cpu %q: want a comma-separated list of CPU numbers", gatewayCPUs)
		}
		taken[c] = true
	}
	var rest []string
	for i := range runtime.NumCPU() {
		if c := strconv.Itoa(i); !taken[c] {
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 || len(taken) == 0 {
		return "", fmt.Errorf("-gateway-cpu %q leaves no CPU of %d for the rest", gatewayCPUs, runtime.NumCPU())
	}
	list := strings.Join(rest, ",")
	for _, pid := range descendants(os.Getpid()) {
		if pid == gateway {
			continue
		}
		if out, err := exec.Command("taskset", "-a", "-p", "-c", list, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			if _, statErr := os.Stat("/proc/" + strconv.Itoa(pid)); statErr != nil {
				continue // it ended meanwhile
			}
			return "", fmt.Errorf("taskset pid %d to CPUs %s: %w: %s", pid, list, err, out)
		}
	}
	return list, nil
}

// descendants is root and every process below it, from /proc.
func descendants(root int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut after ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if f := strings.Fields(string(stat[i+1:])); i > 0 && len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

func sectionNames() string {
	var names []string
	for _, s := range bench.Sections {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func run(quick bool, only, out, svgDir, gatewayCPU, pullProxy string, gatewayV int, verbose bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sizes, preset := bench.Full, "full"
	if quick {
		sizes, preset = bench.Quick, "quick"
	}
	var sections []string
	if only != "" {
		sections = strings.Split(only, ",")
	}
	w := io.Writer(os.Stdout)
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprintf(w, "Run %s (%s sizes), %d CPUs (%s), %s.\n\n", time.Now().UTC().Format(time.RFC3339), preset, runtime.NumCPU(), cpuModel(), runtime.Version())

	r := &bench.Runner{Sizes: sizes, Log: os.Stderr, SVGDir: svgDir}
	// In-process sections first, before the environment's goroutines exist.
	inProcess := &bench.Runner{Sizes: sizes, Log: os.Stderr, SVGDir: svgDir}
	errs := bench.RunSections(ctx, inProcess, sections, w)

	if needsEnv(sections) {
		var envLog io.Writer
		if verbose {
			envLog = os.Stderr
		}
		startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		gw := env.GatewayOptions{Enabled: true, CPUs: gatewayCPU}
		if gatewayV > 0 {
			gw.Args = []string{"--v=" + strconv.Itoa(gatewayV)}
		}
		// Karmada's capacity is part of both paths measured: its
		// components get every CPU, as in a real control plane.
		opts := env.Options{Gateway: gw, Log: envLog, ComponentsOnEveryCPU: true, Members: []string{"member1", "member2"}}
		if pullProxy != "" {
			opts.PullMembers = opts.Members[:1]
			opts.PullProxies = map[string]string{opts.Members[0]: pullProxy}
		}
		e, err := env.Start(startCtx, opts)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "start e2e environment:", err)
			return 1
		}
		defer e.Stop()
		if gatewayV > 0 {
			fmt.Fprintf(os.Stderr, "bench: gateway logs in %s (E2E_KEEP=1 keeps them after the run)\n", e.LogDir())
		}
		r.Env = e
		if gatewayCPU != "" {
			rest, err := pinRest(gatewayCPU, e.GatewayPID())
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintf(w, "Cpuset mode: the gateways on CPU %s; the bench and the whole environment, pinned once it started, on CPU %s.\n\n", gatewayCPU, rest)
		}
		if err := r.Setup(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench setup:", err)
			e.WriteLogTails(os.Stderr, 40)
			return 1
		}
		if pullProxy != "" {
			fmt.Fprintf(w, "The bench pods' member, %s, runs in Pull mode behind a %s proxy (its Cluster's spec.proxyURL %s).\n\n", opts.Members[0], pullProxy, e.ProxyURL(opts.Members[0]).Redacted())
		}
		fmt.Fprintf(w, "Direct path for passthrough: karmada-apiserver; for rewritten routes: %s.\n\n", r.DirectPath())
		errs = append(errs, bench.RunSections(ctx, r, sections, w)...)
		if len(errs) > 0 {
			e.WriteLogTails(os.Stderr, 40)
		}
	}
	for _, err := range errs {
		fmt.Fprintln(os.Stderr, "not measured:", err)
	}
	if len(errs) > 0 {
		return 1
	}
	return 0
}

func needsEnv(only []string) bool {
	for _, s := range bench.Sections {
		if s.NeedsEnv && (len(only) == 0 || slices.Contains(only, s.Name)) {
			return true
		}
	}
	return false
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
