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
	"os/signal"
	"runtime"
	"slices"
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
	flag.Parse()
	os.Exit(run(*quick, *only, *out, *svgDir, *verbose))
}

func sectionNames() string {
	var names []string
	for _, s := range bench.Sections {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func run(quick bool, only, out, svgDir string, verbose bool) int {
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
		e, err := env.Start(startCtx, env.Options{Gateway: env.GatewayOptions{Enabled: true}, Log: envLog})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "start e2e environment:", err)
			return 1
		}
		defer e.Stop()
		r.Env = e
		if err := r.Setup(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench setup:", err)
			e.WriteLogTails(os.Stderr, 40)
			return 1
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
