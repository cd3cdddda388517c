package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

const (
	scaleStreamsTarget    = 1000      // the target size
	scaleStreamsRSSLimit  = 300 << 20 // 1,000 concurrent exec sessions under 300 MiB RSS
	scaleStreamsTargetRow = "1,000 sessions < 300 MiB RSS"
	mib                   = 1 << 20
)

// ScalePods is how what the gateway keeps per pod grows with the pods it
// caches: MeasureResolver (the resolver section's measurement) at each of
// Sizes.ScalePods, in this process. Creating 100k pods in the environment's
// real Karmada is not feasible on the machines this runs on.
func (r *Runner) ScalePods(context.Context) (*Table, error) {
	t := &Table{
		Title: "Scale: gateway caches vs pods (in-process)",
		Columns: []string{"pods in caches", "Go heap (live)", "heap per pod", "of which pod metadata", "of which binding",
			"RSS growth", "CPU to load", "CPU per pod", "lookup, labelled pod", "lookup, via binding", "target", "verdict"},
		Note: "In this process, not the gateway's: N pod metadata objects and N ResourceBindings (as karmada-apiserver returns them), each " +
			"through the gateway's own informer transform (TrimPod, TrimBinding), added to informer stores with the production " +
			"spec.resource index, then Resolver.Resolve timed with testing.Benchmark. Go heap is the live heap after GC the stores added; " +
			"RSS growth is this process's VmRSS after minus before (memory freed by earlier sizes returned first); CPU to load is this process's " +
			"user+system time to build each object (in place of decoding it), transform it and store it, GC included.",
	}
	var heap, rss, xs []float64
	for _, n := range r.Sizes.ScalePods {
		r.logf("scale: %d pods in the caches", n)
		c, err := MeasureResolver(n)
		if err != nil {
			return nil, err
		}
		t.Add(strconv.Itoa(n), FormatBytes(c.Heap), FormatBytes(c.BytesPerPod), FormatBytes(c.PodBytes), FormatBytes(c.BindingBytes),
			FormatBytes(c.RSSGrowth), FormatDuration(c.LoadCPU), FormatDuration(c.LoadCPU/time.Duration(n)),
			FormatDuration(c.LabelLookup), FormatDuration(c.BindingLookup), resolverTarget, string(c.Verdict()))
		xs, heap, rss = append(xs, float64(n)), append(heap, c.Heap/mib), append(rss, c.RSSGrowth/mib)
	}
	note, err := r.writeChart("scale-pods.svg", Chart{
		Title: "Gateway caches vs pods (in-process)", XLabel: "pods (each with a ResourceBinding)", YLabel: "MiB",
		LogX: true, LogY: true, XFormat: formatCount,
		Series: []Series{{Name: "Go heap (live)", X: xs, Y: heap}, {Name: "RSS growth", X: xs, Y: rss}},
	})
	t.Note += note
	return t, err
}

// ScaleStreams is how the gateway's RSS, heap and CPU grow with concurrent
// exec sessions: holdSessions (the sessions section's measurement) at each
// of Sizes.ScaleStreams, each on a freshly started gateway.
func (r *Runner) ScaleStreams(ctx context.Context) (t *Table, err error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	// Repeating the auth mode already in effect is a no-op flag; giving it
	// replaces the extra flags below, so later sections get the gateway the
	// environment started.
	defer func() {
		if rerr := r.Env.RestartGateway(context.WithoutCancel(ctx), "--auth-mode=passthrough"); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore the gateway: %w", rerr))
		}
	}()
	var nofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	t = &Table{
		Title: "Scale: gateway vs concurrent exec sessions",
		Columns: []string{"sessions", "opened", "RSS before", "RSS peak", "RSS per session", "Go heap peak", "heap per session",
			"CPU opening", "CPU per session opened", "CPU while held", "target", "verdict"},
		Note: fmt.Sprintf("Each size on a freshly started gateway, with --max-streams-per-client=0: every session uses the exec-only token, and the "+
			"default cap of 200 per client would refuse the rest with 429. Sessions are `cat` over SPDY, opened %d at a time, each proven live by "+
			"an echo, then held %s idle. RSS, Go heap (go_memstats_heap_alloc_bytes) and CPU are the gateway process's own, sampled every second; "+
			"per session is (peak − before)/opened. The bench process (client side) has RLIMIT_NOFILE %d.",
			sessionBurst, r.Sizes.ScaleHold, nofile.Cur) + r.proxyNote("The gateway's upstream"),
	}
	var xs, rss, heap []float64
	for _, n := range r.Sizes.ScaleStreams {
		if err := r.Env.RestartGateway(ctx, "--max-streams-per-client=0"); err != nil {
			return nil, err
		}
		l, err := r.holdSessions(ctx, p.gateway, holdOptions{n: n, holdFor: r.Sizes.ScaleHold})
		if err != nil {
			return nil, fmt.Errorf("%d sessions: %w", n, err)
		}
		target, verdict := l.streamsVerdict(scaleStreamsTargetRow)
		t.Add(strconv.Itoa(n), l.openedCell(), FormatBytes(l.rssBefore), FormatBytes(l.rssPeak), FormatBytes(l.perSession(l.rssPeak-l.rssBefore)),
			FormatBytes(l.heapPeak), FormatBytes(l.perSession(l.heapPeak-l.heapBefore)),
			fmt.Sprintf("%.2f core-s", l.cpuOpen), fmt.Sprintf("%.1f core-ms", 1000*l.perSession(l.cpuOpen)), fmt.Sprintf("%.3f cores", l.cores()),
			target, string(verdict))
		if l.opened > 0 {
			xs, rss, heap = append(xs, float64(l.opened)), append(rss, l.rssPeak/mib), append(heap, l.heapPeak/mib)
		}
	}
	if !slices.Contains(r.Sizes.ScaleStreams, scaleStreamsTarget) {
		t.Add(strconv.Itoa(scaleStreamsTarget), "not in this run's sizes", "", "", "", "", "", "", "", "", scaleStreamsTargetRow, string(NotMeasured))
	}
	limitX := []float64{10, 1000}
	if len(xs) > 0 {
		limitX = []float64{math.Min(xs[0], 10), math.Max(xs[len(xs)-1], scaleStreamsTarget)}
	}
	note, err := r.writeChart("scale-streams.svg", Chart{
		Title: "Gateway vs concurrent exec sessions", XLabel: "concurrent exec sessions (SPDY, idle cat)", YLabel: "MiB",
		LogX: true, XFormat: formatCount,
		Series: []Series{
			{Name: "RSS peak", X: xs, Y: rss},
			{Name: "Go heap peak", X: xs, Y: heap},
			{Name: "target: 300 MiB RSS", X: limitX, Y: []float64{scaleStreamsRSSLimit / mib, scaleStreamsRSSLimit / mib}, Dashed: true},
		},
	})
	t.Note += note
	return t, err
}

// openedCell is how many sessions opened, as a table cell: with the first
// error when not all did, and those that ended while held.
func (l sessionLoad) openedCell() string {
	opened := strconv.Itoa(l.opened)
	if l.openErr != nil {
		opened = fmt.Sprintf("%d, then: %v", l.opened, l.openErr)
	}
	if l.ended > 0 {
		opened += fmt.Sprintf(" (%d ended while held)", l.ended)
	}
	return opened
}

// perSession is v shared among the sessions that opened.
func (l sessionLoad) perSession(v float64) float64 { return v / float64(max(1, l.opened)) }

// streamsVerdict is the issues' target for the size it names, given as
// row (scale-streams' and recorded-sessions' are both 1,000 sessions under
// 300 MiB): RSS with every one of 1,000 sessions open through the hold.
// Fewer proves nothing about 1,000, so it is not measured rather than met.
func (l sessionLoad) streamsVerdict(row string) (target string, v Verdict) {
	if l.n != scaleStreamsTarget {
		return "", NoTarget
	}
	if l.opened < l.n || l.ended > 0 {
		return row, NotMeasured
	}
	return row, AtMost(l.rssPeak, scaleStreamsRSSLimit-1)
}

// writeChart writes c as name in SVGDir, if set, and returns the note
// sentence that points at it.
func (r *Runner) writeChart(name string, c Chart) (string, error) {
	if r.SVGDir == "" {
		return "", nil
	}
	path := filepath.Join(r.SVGDir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := errors.Join(c.SVG(f), f.Close()); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return " Plotted in " + name + ".", nil
}

// selfRSS is this process's resident set in bytes (VmRSS), 0 if unknown.
func selfRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
