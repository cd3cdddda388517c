package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

const (
	sessionsRSSLimit = 200 << 20 // 200 concurrent streams under 200 MiB RSS
	// sessionBurst is how many sessions are being opened at once, as a
	// burst of users would.
	sessionBurst = 20
	// sessionOpenTimeout bounds the wait for a session that neither opens
	// nor fails, so a stuck one is reported rather than hanging the run.
	sessionOpenTimeout = 3 * time.Minute
)

// sessionLoad is what holding n exec sessions open cost the gateway.
type sessionLoad struct {
	n, opened            int
	openErr              error // the first session that could not be opened; nil when all were
	openTime             time.Duration
	held                 time.Duration
	ended                int // sessions that ended during the hold
	rssBefore, rssPeak   float64
	heapBefore, heapPeak float64
	cpuOpen              float64 // core-seconds from before the first session to all open
	cpuHeld              float64 // core-seconds during the hold
}

// cores is the CPU the held sessions kept busy.
func (l sessionLoad) cores() float64 { return l.cpuHeld / l.held.Seconds() }

// holdOptions says which sessions holdSessions holds, and through which
// gateway.
type holdOptions struct {
	n       int
	holdFor time.Duration
	// metricsURL is the base URL of the metrics port of the gateway the
	// sessions go through; "" is the environment's gateway.
	metricsURL string
	// tty opens each session with a terminal, as `kubectl exec -it` does
	// (what --record-sessions=tty records), and sends nothing on it: the
	// session proves itself live by printing a line, then its cat waits on
	// the terminal. Without tty, each session is proven live by an echo.
	tty bool
	// held, when set, is called at the end of the hold, every session that
	// opened still open; its error is the measurement's.
	held func() error
}

// holdSessions opens o.n exec sessions (`cat`, SPDY) with cfg, each proven
// live, holds the ones that opened for o.holdFor while sampling the
// gateway's RSS and heap every second, then closes them. Sessions that could
// not be opened are counted in the result, not returned as an error: how far
// it got is the measurement. Only a failed metrics scrape (or o.held) is an
// error.
func (r *Runner) holdSessions(ctx context.Context, cfg *rest.Config, o holdOptions) (sessionLoad, error) {
	n, holdFor := o.n, o.holdFor
	process := func(ctx context.Context) (procSample, error) {
		if o.metricsURL == "" {
			return r.gatewayProcess(ctx)
		}
		return r.processAt(ctx, o.metricsURL)
	}
	l := sessionLoad{n: n}
	before, err := process(ctx)
	if err != nil {
		return l, err
	}
	l.rssBefore, l.heapBefore = before.rss, before.heap
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type session struct {
		in   *io.PipeWriter
		done chan error
		live bool
	}
	type opened struct {
		i   int
		err error
	}
	sessions := make([]*session, n)
	live := make(chan opened, n)
	sem := make(chan struct{}, sessionBurst)
	kind := "exec"
	if o.tty {
		kind = "TTY exec"
	}
	r.logf("opening %d %s sessions through the gateway", n, kind)
	openStart := time.Now()
	for i := range n {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		s := &session{in: inW, done: make(chan error, 1)}
		sessions[i] = s
		cmd := []string{"cat"}
		if o.tty {
			cmd = []string{"sh", "-c", fmt.Sprintf("echo live-%d; exec cat", i)}
		}
		go func() {
			sem <- struct{}{}
			err := execIn(ctx, cfg, "SPDY", shellPod, cmd, o.tty, inR, outW)
			// A session refused before it read stdin would leave its echo
			// blocked in the write for good.
			inR.CloseWithError(fmt.Errorf("session ended: %v", err))
			outW.CloseWithError(fmt.Errorf("session ended: %v", err))
			s.done <- err
		}()
		go func() {
			var err error
			if o.tty {
				err = readLive(outR, i)
			} else {
				err = echo(inW, outR, i)
			}
			<-sem // this session is open (or failed): let the next one start
			live <- opened{i, err}
			_, _ = io.Copy(io.Discard, outR)
		}()
	}
	deadline := time.NewTimer(sessionOpenTimeout)
	defer deadline.Stop()
wait:
	for range n {
		select {
		case op := <-live:
			if op.err != nil {
				if l.openErr == nil {
					l.openErr = fmt.Errorf("session %d: %w", op.i, op.err)
				}
				continue
			}
			sessions[op.i].live = true
			l.opened++
		case <-deadline.C:
			l.openErr = fmt.Errorf("%d sessions neither opened nor failed within %s", n-l.opened, sessionOpenTimeout)
			break wait
		case <-ctx.Done():
			return l, ctx.Err()
		}
	}
	l.openTime = time.Since(openStart)
	r.logf("%d of %d sessions live after %s; holding for %s", l.opened, n, l.openTime.Round(time.Millisecond), holdFor)

	holdStart, err := process(ctx)
	if err != nil {
		return l, err
	}
	l.cpuOpen = holdStart.cpu - before.cpu
	l.rssPeak, l.heapPeak = holdStart.rss, holdStart.heap
	held := time.Now()
	tick := time.NewTicker(time.Second)
	for time.Since(held) < holdFor {
		select {
		case <-ctx.Done():
			tick.Stop()
			return l, ctx.Err()
		case <-tick.C:
		}
		s, err := process(ctx)
		if err != nil {
			tick.Stop()
			return l, err
		}
		l.rssPeak, l.heapPeak = max(l.rssPeak, s.rss), max(l.heapPeak, s.heap)
	}
	tick.Stop()
	end, err := process(ctx)
	if err != nil {
		return l, err
	}
	l.held = time.Since(held)
	l.cpuHeld = end.cpu - holdStart.cpu
	l.rssPeak, l.heapPeak = max(l.rssPeak, end.rss), max(l.heapPeak, end.heap)
	if o.held != nil {
		if err := o.held(); err != nil {
			return l, err
		}
	}

	for _, s := range sessions {
		if !s.live {
			continue
		}
		select {
		case <-s.done:
			l.ended++
		default:
		}
	}
	// Closing stdin ends cat; waiting for it keeps this run's sessions from
	// being counted in the next measurement's RSS. On a terminal, the end
	// of stdin is not an end of file for cat (^D typed on the terminal
	// is): terminal sessions are dropped instead, as closing kubectl's
	// terminal drops them.
	if o.tty {
		cancel()
	}
	var wg sync.WaitGroup
	for _, s := range sessions {
		_ = s.in.Close()
		wg.Go(func() {
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
			}
		})
	}
	wg.Wait()
	return l, nil
}

// Sessions holds Sizes.Sessions exec sessions (`cat`, SPDY) open through the
// gateway for Sizes.HoldFor, each proven live by an echo, and reports the
// gateway's RSS and CPU from its process metrics.
func (r *Runner) Sessions(ctx context.Context) (*Table, error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	n := r.Sizes.Sessions
	l, err := r.holdSessions(ctx, p.gateway, holdOptions{n: n, holdFor: r.Sizes.HoldFor})
	if err != nil {
		return nil, err
	}
	if l.openErr != nil {
		return nil, fmt.Errorf("open %d sessions: %w", n, l.openErr)
	}
	if l.ended > 0 {
		return nil, fmt.Errorf("%d of %d sessions ended during the hold", l.ended, n)
	}
	t := &Table{
		Title:   fmt.Sprintf("%d concurrent exec sessions through the gateway, held %s", n, l.held.Round(time.Second)),
		Columns: []string{"measurement", "value", "target", "verdict"},
		Note: fmt.Sprintf("Sessions are `cat` over SPDY, each proven live by an echo, opened %d at a time (all live after %s). "+
			"RSS and CPU are the gateway process's own (process_resident_memory_bytes, process_cpu_seconds_total on its metrics port); "+
			"RSS peak is sampled every second.", sessionBurst, l.openTime.Round(time.Millisecond)) + r.proxyNote("The gateway's upstream"),
	}
	t.Add("gateway RSS before", FormatBytes(l.rssBefore), "", "")
	t.Add("gateway RSS peak while held", FormatBytes(l.rssPeak), "< 200 MiB", string(AtMost(l.rssPeak, sessionsRSSLimit-1)))
	t.Add("gateway RSS per session (peak − before)", FormatBytes((l.rssPeak-l.rssBefore)/float64(n)), "", "")
	t.Add("gateway CPU while held (idle streams)", fmt.Sprintf("%.3f cores", l.cores()), "", "")
	t.Add("gateway CPU opening the sessions", fmt.Sprintf("%.2f core-seconds", l.cpuOpen), "", "")
	return t, nil
}

// echo proves session i live: what is written to its cat comes back.
func echo(in io.Writer, out io.Reader, i int) error {
	if _, err := fmt.Fprintf(in, "live-%d\n", i); err != nil {
		return err
	}
	return readLive(out, i)
}

// readLive reads session i's first line, which must be live-i (a
// terminal ends it with \r\n).
func readLive(out io.Reader, i int) error {
	line, err := bufio.NewReader(out).ReadString('\n')
	if want := fmt.Sprintf("live-%d", i); err == nil && strings.TrimRight(line, "\r\n") != want {
		err = fmt.Errorf("session %d printed %q, want %s", i, line, want)
	}
	return err
}
